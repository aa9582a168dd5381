module github.com/cert-manager/cert-manager/controller-binary

go 1.26.0
