#!/usr/bin/env bash
# Guards against committing weights, node_modules or generated data (a submission over 512 MiB is refused whole).
set -euo pipefail
cd "$(dirname "$0")/.."
big=$(git ls-files -z | xargs -0 -r du -k 2>/dev/null | awk '$1 > 1024 {print}')
if [ -n "$big" ]; then echo "tracked files over 1 MiB:"; echo "$big"; exit 1; fi
echo "repo size ok: $(git ls-files | wc -l) tracked files, $(git ls-files -z | xargs -0 -r cat 2>/dev/null | wc -c) bytes"
