// Builds the pause program, the sandbox (infra) container of every pod in the local test cluster.
module github.com/etcd-database/etcd-operator/hack/tools/pause

go 1.26.0
