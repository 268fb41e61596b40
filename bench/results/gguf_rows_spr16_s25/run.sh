#!/bin/bash
# device call 2 (session 25): does a row block that fits SPR's 2 MB L2 help the GGUF GEMM on 16
# cores?  Three builds of this tree: the activations of a panel's pass within 4 MB (now),
# 1.5 MB and 0.75 MB (rows per block >= 64), then gguf_amx_check (tiles and VNNI, int8/int4)
T0=$(date +%s); LIM=${LIM:-585}
left() { echo $(( LIM - ($(date +%s) - T0) )); }
for v in 4096 1536 768; do
  mkdir -p /tmp/v$v && git ls-files -z | xargs -0 -I{} cp --parents {} /tmp/v$v/ 2>/dev/null
  (cd /tmp/v$v && CFLAGS="-DH3_GGUF_BLOCK_BYTES=$((v*1024)) -DH3_GGUF_MIN_ROWS=64" python3 setup.py -q build_ext --inplace -j 5 > $OUT/build_$v.log 2>&1; echo "build $v rc $?") &
done
wait
echo "built at $(( $(date +%s) - T0 )) s"
for r in 1 2; do
for v in 4096 1536 768; do
  echo "== $v KB round $r $(left)"; (cd /tmp/v$v && PYTHONPATH=$PWD timeout 100 python3 bench/gguf_amx_check.py --threads 16 --rounds 1 --calls 3 --types Q8_0,Q4_K,Q6_K --shapes qkv,down > $OUT/check_${v}_$r.txt 2>&1; echo rc $?); grep -E '^\| (qkv|down)' $OUT/check_${v}_$r.txt | cut -c1-200
done
done
echo "end at $(( $(date +%s) - T0 )) s"
