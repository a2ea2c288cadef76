# test-failures.awk: from `go test -v` output, what each failed test printed,
# shortly, to be read at the end of a long log (CI keeps its tail): every
# message's first line, then the last lines the test printed.
# Usage: awk -f scripts/test-failures.awk go-test.log

/^=== (RUN|NAME|CONT) / { cur = $3; next }
/^ *--- FAIL: / { failed[$3] = 1; order[++n] = $3; next }
/^ *--- (PASS|SKIP): / || /^=== PAUSE / { next }
# A test's messages are indented; go test's and TestMain's own lines are not.
cur != "" && /^    / { lines[cur, ++count[cur]] = $0 }

END {
	shown = 0
	for (i = 1; i <= n; i++) {
		t = order[i]
		leaf = 1
		for (f in failed)
			if (index(f, t "/") == 1) { leaf = 0; break }
		if (!leaf)
			continue
		if (++shown > 3) {
			print "test-failures: more failed tests; the log has them"
			break
		}
		print "test-failures: " t
		for (k = 1; k <= count[t]; k++)
			if (lines[t, k] ~ /^    [A-Za-z0-9_.-]+\.go:[0-9]+: /)
				print "  " substr(lines[t, k], 5, 200)
		print "  ... its last lines:"
		for (k = (count[t] > 15 ? count[t] - 14 : 1); k <= count[t]; k++)
			print "  " substr(lines[t, k], 1, 200)
	}
}
