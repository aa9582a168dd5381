package controllers

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
)

func TestReconcileErrorReasonIsWhatStatusSays(t *testing.T) {
	failedStep := &etcdv1alpha1.EtcdCluster{}
	setCondition(failedStep, etcdv1alpha1.ConditionProgressing, metav1.ConditionTrue, etcdv1alpha1.ReasonScalingUp, "AddLearner failed, will retry")
	tests := []struct {
		name       string
		c          *etcdv1alpha1.EtcdCluster
		err, patch error
		want       string
	}{
		{"success", failedStep, nil, nil, ""},
		{"certificates", &etcdv1alpha1.EtcdCluster{}, &accessError{reason: etcdv1alpha1.ReasonCertificateError, err: errors.New("x")}, nil, etcdv1alpha1.ReasonCertificateError},
		{"a step failed", failedStep, errors.New("add learner"), nil, etcdv1alpha1.ReasonScalingUp},
		{"only the status write failed", failedStep, nil, errors.New("conflict"), reasonStatusNotWritten},
		{"no condition to tell", &etcdv1alpha1.EtcdCluster{}, errors.New("list pods"), nil, etcdv1alpha1.ReasonReconcileError},
	}
	for _, tt := range tests {
		if got := reconcileErrorReason(tt.c, tt.err, tt.patch); got != tt.want {
			t.Errorf("%s: reason %q, want %q", tt.name, got, tt.want)
		}
	}
}
