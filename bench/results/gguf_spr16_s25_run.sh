#!/bin/bash
# device call (session 25): #24 GGUF on 16 cores after the per-256 activation groups and the
# unsigned-activation AVX-512 kernel: bits on AMX, new vs old (.old = f509c9d) VNNI kernel, tiles,
# int8/int4, and h3cy vs ggml (8e800cef, .ggml-src) at M = 2048 / 128
T0=$(date +%s); LIM=${LIM:-585}
left() { echo $(( LIM - ($(date +%s) - T0) )); }
lscpu | grep -E 'Model name|^CPU\(s\)' ; nproc
(python3 setup.py -q build_ext --inplace -j 6 > $OUT/new_build.log 2>&1; echo "new build rc $?") &
(cd .old && python3 setup.py -q build_ext --inplace -j 5 > $OUT/old_build.log 2>&1; echo "old build rc $?") &
(bash bench/ggml_gemm/build.sh .ggml-src /tmp/ggml-bin -j 5 > $OUT/ggml_build.log 2>&1; echo "ggml build rc $?") &
wait
echo "built at $(( $(date +%s) - T0 )) s"
echo "== new gguf_amx_check $(left)"; PYTHONPATH=$PWD timeout 170 python3 bench/gguf_amx_check.py --threads 16 --rounds 2 --calls 2 --types Q8_0,Q4_K,Q6_K,Q3_K --shapes qkv,down,te_q > $OUT/gguf_amx_check_new.txt 2>&1; echo rc $?; grep -E '^\||^#|ok|bits' $OUT/gguf_amx_check_new.txt | cut -c1-220
echo "== old gguf_amx_check $(left)"; (cd .old && PYTHONPATH=$PWD timeout 120 python3 bench/gguf_amx_check.py --threads 16 --rounds 2 --calls 2 --types Q8_0,Q4_K,Q6_K,Q3_K --shapes qkv,down,te_q > $OUT/gguf_amx_check_old.txt 2>&1; echo rc $?); grep -E '^\||^#' $OUT/gguf_amx_check_old.txt | cut -c1-220
echo "== gguf_vs_ggml $(left)"; PYTHONPATH=$PWD timeout $(( $(left) - 10 )) python3 bench/gguf_vs_ggml.py --ggml-bin /tmp/ggml-bin --threads 16 --isa avx512 --m 2048 --te-m 128 --shapes qkv,down,te_q --types Q8_0,Q6_K,Q5_K,Q4_K,Q3_K --rounds 2 --reps 1 --json $OUT/gguf_vs_ggml_16.jsonl > $OUT/gguf_vs_ggml_16.md 2>&1; echo rc $?; cat $OUT/gguf_vs_ggml_16.md | cut -c1-250
echo "end at $(( $(date +%s) - T0 )) s"
