"""Build bench/text_layer_c.c against this checkout's csrc/ (setup.py's flags, -O3, through
tests/c/cbuild.py) and run it: one full-size Qwen3-VL-32B text layer timed in C alone.

    python3 bench/text_layer_c.py --threads 2 --L 128 [--weights int4] [--reps 8]

For A/B of two commits, run it from two checkouts in turn; equal checksums mean equal bits.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "c"))
import cbuild  # noqa: E402


def main():
    exe = cbuild.build("bench_text_layer", extra=["-O3"], jobs=os.cpu_count() or 2,
                       driver=os.path.join(ROOT, "bench", "text_layer_c.c"))
    sys.exit(subprocess.run([str(exe)] + sys.argv[1:]).returncode)


if __name__ == "__main__":
    main()
