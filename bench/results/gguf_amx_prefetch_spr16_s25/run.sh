#!/bin/bash
# device call 3 (session 25): does prefetching the AMX tile kernel's A rows (stride K, L3) help?
# builds with GGUF_AMX_PF = 0 (none), 4 (default), 8 steps ahead; gguf_amx_check tiles vs VNNI
T0=$(date +%s); LIM=${LIM:-585}
left() { echo $(( LIM - ($(date +%s) - T0) )); }
for v in 0 4 8; do
  mkdir -p /tmp/p$v && git ls-files -z | xargs -0 -I{} cp --parents {} /tmp/p$v/ 2>/dev/null
  (cd /tmp/p$v && CFLAGS="-DGGUF_AMX_PF=$v" python3 setup.py -q build_ext --inplace -j 5 > $OUT/build_$v.log 2>&1; echo "build $v rc $?") &
done
wait
echo "built at $(( $(date +%s) - T0 )) s"
for r in 1 2; do
for v in 0 4 8; do
  echo "== PF $v round $r $(left)"; (cd /tmp/p$v && PYTHONPATH=$PWD timeout 100 python3 bench/gguf_amx_check.py --threads 16 --rounds 1 --calls 3 --types Q8_0,Q4_K,Q6_K --shapes qkv,down,te_q > $OUT/pf_${v}_$r.txt 2>&1; echo rc $?); grep -E '^\| (qkv|down|te_q)|bits: ok' $OUT/pf_${v}_$r.txt | cut -c1-200
done
done
echo "end at $(( $(date +%s) - T0 )) s"
