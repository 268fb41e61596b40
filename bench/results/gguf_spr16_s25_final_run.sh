#!/bin/bash
# device call 4 (session 25): #24 GGUF on 16 cores at the session's final kernels (groups of 256,
# unsigned activations, float sums, the faster decoder): AMX bits, tiles vs VNNI vs int8/int4,
# and h3cy (VNNI, the AMX path's default) vs ggml 8e800cef at M = 2048 and 128
T0=$(date +%s); LIM=${LIM:-585}
left() { echo $(( LIM - ($(date +%s) - T0) )); }
(python3 setup.py -q build_ext --inplace -j 10 > $OUT/new_build.log 2>&1; echo "new build rc $?") &
(bash bench/ggml_gemm/build.sh .ggml-src /tmp/ggml-bin -j 6 > $OUT/ggml_build.log 2>&1; echo "ggml build rc $?") &
wait
echo "built at $(( $(date +%s) - T0 )) s"
echo "== gguf_amx_check $(left)"; PYTHONPATH=$PWD timeout 150 python3 bench/gguf_amx_check.py --threads 16 --rounds 2 --calls 2 --types Q8_0,Q4_K,Q6_K,Q5_K,Q3_K --shapes qkv,down,te_q > $OUT/gguf_amx_check.txt 2>&1; echo rc $?; grep -E '^\||bits: ok' $OUT/gguf_amx_check.txt | cut -c1-200
echo "== gguf_vs_ggml $(left)"; PYTHONPATH=$PWD timeout $(( $(left) - 10 )) python3 bench/gguf_vs_ggml.py --ggml-bin /tmp/ggml-bin --threads 16 --isa avx512 --m 2048 --te-m 128 --shapes qkv,down,te_q --types Q8_0,Q6_K,Q5_K,Q4_K,Q3_K --rounds 2 --reps 1 --json $OUT/gguf_vs_ggml_16.jsonl > $OUT/gguf_vs_ggml_16.md 2>&1; echo rc $?; grep -A14 'All shapes' $OUT/gguf_vs_ggml_16.md
echo "end at $(( $(date +%s) - T0 )) s"
