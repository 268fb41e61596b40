#!/bin/bash
# device call 5 (session 25): the AVX-VNNI (VEX) GGUF kernel on unsigned activations: bits on
# every path (C driver, pytest), and its speed against f509c9d's (.old) on 16 SPR cores
T0=$(date +%s); LIM=${LIM:-570}
left() { echo $(( LIM - ($(date +%s) - T0) )); }
(python3 setup.py -q build_ext --inplace -j 9 > $OUT/new_build.log 2>&1; echo "new build rc $?") &
(cd .old && python3 setup.py -q build_ext --inplace -j 7 > $OUT/old_build.log 2>&1; echo "old build rc $?") &
wait
echo "built at $(( $(date +%s) - T0 )) s"
echo "== C driver gguf $(left)"; timeout 120 python3 tests/c/cbuild.py native --only gguf > $OUT/cdriver.txt 2>&1; echo rc $?; tail -n 3 $OUT/cdriver.txt
echo "== pytest gguf $(left)"; PYTHONPATH=$PWD timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_gguf.py tests/test_gguf_lora.py > $OUT/pytest.txt 2>&1; echo rc $?; tail -n 2 $OUT/pytest.txt; grep -c avxvnni $OUT/pytest.txt
for r in 1 2; do for tree in .old .; do
  echo "== $tree avxvnni round $r $(left)"; (cd $tree && H3CY_ISA=avxvnni PYTHONPATH=$PWD timeout 60 python3 bench/gguf_gemm.py --threads 16 --rounds 1 --calls 3 --m 2048 --types Q8_0,Q4_K,Q6_K,Q3_K --shapes qkv,down 2>&1 | grep -E '^\| (qkv|down)|^#')
done; done
echo "end at $(( $(date +%s) - T0 )) s"
