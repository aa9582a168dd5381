// Package certmanager finds cert-manager's CRDs for tests against a kube-apiserver (envtest)
// that play cert-manager's part: the deploy/crds directory of the module
// github.com/cert-manager/cert-manager at the version hack/tools/cert-manager pins, as make
// cert-manager-up installs them.
package certmanager

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// crdsEnv names the directory, when it is already known (CERT_MANAGER_CRDS of
// hack/cert-manager.mk).
const crdsEnv = "CERT_MANAGER_CRDS"

// CRDs is the directory of cert-manager's CRDs, from the module cache, downloaded first if
// missing.
func CRDs() (string, error) {
	if dir := os.Getenv(crdsEnv); dir != "" {
		return dir, nil
	}
	_, file, _, _ := runtime.Caller(0)
	tools := filepath.Join(filepath.Dir(file), "..", "..", "hack", "tools", "cert-manager")
	const module = "github.com/cert-manager/cert-manager"
	download := exec.Command("go", "mod", "download", module)
	download.Dir = tools
	if out, err := download.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go mod download %s: %w: %s", module, err, out)
	}
	list := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	list.Dir = tools
	out, err := list.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", module, err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds"), nil
}
