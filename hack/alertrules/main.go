// Command alertrules writes the rule groups of a PrometheusRule as a Prometheus rule file, the
// form promtool reads: config/prometheus/prometheusrule.yaml is the one source of the alerts,
// and make test-alerts tests what it ships.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: alertrules PROMETHEUSRULE.yaml > rules.yaml")
		os.Exit(2)
	}
	out, err := ruleFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if _, err := os.Stdout.Write(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
