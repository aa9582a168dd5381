package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	etcdv1alpha1 "github.com/etcd-database/etcd-operator/api/v1alpha1"
	"github.com/etcd-database/etcd-operator/internal/encryption"
)

// keysProblem is why a Secret of encryption keys cannot be used, as a condition reason and a
// message that names the cause and the fix; never a key.
type keysProblem struct{ reason, message string }

// readEncryptionKeys reads and checks the Secret of keys enc names, before any Job mounts it:
// a Job started without it would sit in CreateContainerConfigError, and one with a malformed
// key would fail only once it ran. The keys are parsed to learn their ids, and go no further.
func readEncryptionKeys(ctx context.Context, reader client.Reader, namespace string, enc *etcdv1alpha1.SnapshotEncryption) (*encryption.Keyring, *keysProblem) {
	secret := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: enc.SecretName}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &keysProblem{etcdv1alpha1.ReasonEncryptionKeysNotFound, fmt.Sprintf(
				"Secret %s of encryption keys does not exist in namespace %s: create it with an age key per entry (`age-keygen -o key.txt`, then `kubectl create secret generic %s --from-file=<YYYY-MM-DD>=key.txt`), or name the Secret that holds the keys",
				enc.SecretName, namespace, enc.SecretName)}
		}
		return nil, &keysProblem{etcdv1alpha1.ReasonEncryptionKeysNotFound, fmt.Sprintf("read Secret %s of encryption keys: %v", enc.SecretName, err)}
	}
	keys, err := encryption.Parse(enc.SecretName, secret.Data)
	if err != nil {
		return nil, &keysProblem{etcdv1alpha1.ReasonEncryptionKeysInvalid, err.Error()}
	}
	return keys, nil
}

// snapshotKeyProblem says why a snapshot encrypted to keyID cannot be decrypted with the keys
// enc names, or nil when it can (or is not encrypted). what names the snapshot, field the
// setting that names the Secret, and consequence ends the message: what was not touched.
func snapshotKeyProblem(ctx context.Context, reader client.Reader, namespace string, enc *etcdv1alpha1.SnapshotEncryption, keyID, what, field, consequence string) *keysProblem {
	if keyID == "" {
		return nil
	}
	if enc == nil || enc.SecretName == "" {
		return &keysProblem{etcdv1alpha1.ReasonEncryptionKeyMissing, fmt.Sprintf(
			"%s is encrypted to key %s and no Secret of encryption keys is given: set %s to the Secret that holds it; %s", what, keyID, field, consequence)}
	}
	keys, problem := readEncryptionKeys(ctx, reader, namespace, enc)
	if problem != nil {
		problem.message += "; " + consequence
		return problem
	}
	if !keys.Has(keyID) {
		return &keysProblem{etcdv1alpha1.ReasonEncryptionKeyMissing, fmt.Sprintf(
			"%s is encrypted to key %s, which Secret %s does not hold (it holds %s): put that key's age identity back into the Secret, or name the Secret that holds it; %s",
			what, keyID, enc.SecretName, keys.Describe(), consequence)}
	}
	return nil
}
