module github.com/cert-manager/cert-manager/webhook-binary

go 1.26.0
