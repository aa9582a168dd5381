// Package olm checks the OLM packaging without a cluster: that bundle/ passes the validators
// OperatorHub's pipeline runs, that it grants and owns exactly what config/ and the code say, that
// the file-based catalog is valid with the current bundle at the head of its channel, and that
// `make bundle` would regenerate bundle/ unchanged.
package olm

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

const (
	repoRoot = "../.."
	pkgName  = "etcd-operator"
	// catalogTemplate is the semver template make catalog renders the catalog from.
	catalogTemplate = "catalog-template.yaml"
)

func repoPath(parts ...string) string {
	return filepath.Join(append([]string{repoRoot}, parts...)...)
}

// loadBundle reads bundle/ as OLM and operator-sdk do.
func loadBundle(t *testing.T) *manifests.Bundle {
	t.Helper()
	bundle, err := manifests.GetBundleFromDir(repoPath("bundle", "manifests"))
	if err != nil {
		t.Fatalf("read bundle/: %v", err)
	}
	if bundle.CSV == nil {
		t.Fatal("bundle/manifests has no ClusterServiceVersion")
	}
	return bundle
}

// decodeYAMLFile decodes every document of a YAML file into a new T.
func decodeYAMLFile[T any](t *testing.T, path string) []T {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	decoder := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []T
	for {
		var v T
		if err := decoder.Decode(&v); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
}

// managerDeployment is the operator's Deployment in the CSV's install strategy.
func managerDeployment(t *testing.T, csv *operatorsv1alpha1.ClusterServiceVersion) operatorsv1alpha1.StrategyDeploymentSpec {
	t.Helper()
	deployments := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs
	if len(deployments) != 1 {
		t.Fatalf("the CSV installs %d Deployments, want 1", len(deployments))
	}
	return deployments[0]
}

// createdAt is the one line of a generated bundle that changes on every generation.
var createdAt = regexp.MustCompile(`(?m)^(\s*createdAt:).*$`)

func withoutCreatedAt(data []byte) []byte {
	return createdAt.ReplaceAll(data, []byte("$1 <normalised>"))
}

// envValue is the value of the environment variable name, or "".
func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
