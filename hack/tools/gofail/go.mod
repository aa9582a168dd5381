// Builds gofail, which turns the operator's failpoint comments into code for the failpoint build
// (make failpoint-build); that build links the runtime of the same version.
module github.com/etcd-database/etcd-operator/hack/tools/gofail

go 1.26.0

require go.etcd.io/gofail v0.2.0
