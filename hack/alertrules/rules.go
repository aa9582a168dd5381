package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// prometheusRule is the part of a monitoring.coreos.com/v1 PrometheusRule that holds rules.
// Read strictly: a misspelt field (severity under annotations, an unknown key of a rule) fails
// here rather than ships.
type prometheusRule struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		Groups []group `json:"groups"`
	} `json:"spec"`
}

type group struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func readPrometheusRule(path string) (*prometheusRule, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pr prometheusRule
	if err := yaml.UnmarshalStrict(raw, &pr); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if pr.Kind != "PrometheusRule" || len(pr.Spec.Groups) == 0 {
		return nil, fmt.Errorf("%s: not a PrometheusRule with rule groups", path)
	}
	return &pr, nil
}

// ruleFile is the PrometheusRule's groups as a Prometheus rule file.
func ruleFile(path string) ([]byte, error) {
	pr, err := readPrometheusRule(path)
	if err != nil {
		return nil, err
	}
	return yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
}
