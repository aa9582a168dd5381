module github.com/cert-manager/cert-manager/cainjector-binary

go 1.26.0
