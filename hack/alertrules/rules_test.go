package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	rulesPath   = "../../config/prometheus/prometheusrule.yaml"
	runbookPath = "../../docs/alerts.md"
	runbookURL  = "https://github.com/etcd-database/etcd-operator/blob/main/docs/alerts.md#"
)

// promtoolTests is the part of a promtool test file that says which alerts are expected.
type promtoolTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `json:"exp_labels"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// Every shipped alert, at each of its severities, has a promtool test in which it fires and one
// in which it does not (promtool itself runs them: make test-alerts); this runs without
// promtool, in make test, so that no alert is added untested.
func TestEveryAlertHasATestThatFiresAndOneThatDoesNot(t *testing.T) {
	pr, err := readPrometheusRule(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("../../test/alerts/*_test.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool test files in test/alerts: %v", err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var tests promtoolTests
		if err := yaml.Unmarshal(raw, &tests); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, group := range tests.Tests {
			for _, tc := range group.AlertRuleTest {
				if len(tc.ExpAlerts) == 0 {
					quiet[tc.Alertname] = true
				}
				for _, a := range tc.ExpAlerts {
					fires[tc.Alertname+"/"+a.ExpLabels["severity"]] = true
				}
			}
		}
	}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if key := r.Alert + "/" + r.Labels["severity"]; !fires[key] {
				t.Errorf("%s (severity %s): no promtool test in which it fires", r.Alert, r.Labels["severity"])
			}
			if !quiet[r.Alert] {
				t.Errorf("%s: no promtool test in which it does not fire", r.Alert)
			}
		}
	}
}

// Every critical alert names its runbook, a section of docs/alerts.md, and every alert says what
// it is about.
func TestEveryCriticalAlertHasARunbook(t *testing.T) {
	pr, err := readPrometheusRule(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(runbookPath)
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\S+)$`).FindAllStringSubmatch(string(raw), -1) {
		headings[strings.ToLower(m[1])] = true
	}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s: want a summary and a description", r.Alert)
			}
			if r.Labels["severity"] != "critical" {
				continue
			}
			anchor := strings.ToLower(r.Alert)
			if got := r.Annotations["runbook_url"]; got != runbookURL+anchor {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, runbookURL+anchor)
			}
			if !headings[anchor] {
				t.Errorf("%s: critical, and docs/alerts.md has no section \"## %s\"", r.Alert, r.Alert)
			}
		}
	}
}
