#!/usr/bin/env bash
# failed-tests.sh LOG: prints, for every test that `go test -v` reported as failed in LOG, the
# lines that test wrote. In a long run with parallel tests a failure's messages sit far from its
# "--- FAIL" line, mixed among other tests' output; CI ends with this so that they are read first.
# At most the last MAX_LINES (default 80) lines of each failed test. The tests that failed on
# their own (no failed subtest) come last: CI shows the end of the output, and a parent's lines
# are mostly what its cleanup dumped.
set -euo pipefail
log=${1:?usage: failed-tests.sh LOG}
max=${MAX_LINES:-80}
awk -v max="$max" '
	# The name a "--- FAIL: name (1.23s)" line or a "=== RUN   name" header is about.
	function name_of(line,    s) { s = line; sub(/^ *(--- FAIL: |=== (RUN|NAME|CONT|PAUSE) +)/, "", s); sub(/ \([0-9.]+s\)$/, "", s); return s }
	FNR == NR { if ($0 ~ /^ *--- FAIL: /) failed[name_of($0)] = 1; next }
	/^=== (RUN|NAME|CONT|PAUSE) / { current = name_of($0); next }
	# Without -v, the lines of a failed test follow its "--- FAIL" line.
	/^ *--- FAIL: / { current = name_of($0); next }
	/^ *--- (PASS|SKIP): / || /^(PASS|FAIL|ok  )/ { current = ""; next }
	current in failed { n[current]++; lines[current, n[current]] = $0 }
	function show(t,    i) {
		if (!(t in n)) return
		printf "=== what %s wrote (%d lines, the last %d shown)\n", t, n[t], (n[t] < max ? n[t] : max)
		for (i = (n[t] > max ? n[t] - max + 1 : 1); i <= n[t]; i++) print lines[t, i]
	}
	function brief(t,    i, k, line) {
		k = 0
		for (i = 1; i <= n[t] && k < 2; i++) {
			line = lines[t, i]
			if (line !~ /_test\.go:[0-9]+: / || tolower(line) !~ /(want|within|deadline|timed out|fail|error|expected|cannot|refused|not found)/) continue
			sub(/^[ \t]+/, "", line)
			printf "%s: %s\n", t, (length(line) > 220 ? substr(line, 1, 220) "…" : line)
			k++
		}
	}
	END {
		for (t in failed) for (u in failed) if (index(u, t "/") == 1) parent[t] = 1
		for (t in failed) if (t in parent) show(t)
		for (t in failed) if (!(t in parent)) show(t)
		# CI shows the end: one or two lines each, those that read as the failure (an expectation,
		# a deadline, an error), cut short, so that every failed test says why within the part shown.
		print "=== in short, what each said of its failure:"
		for (t in failed) if (!(t in parent)) brief(t)
		printf "=== failed on their own:"
		for (t in failed) if (!(t in parent)) printf " %s", t
		print ""
	}
' "$log" "$log"
