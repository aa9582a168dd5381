package controllers

import (
	"context"
	"reflect"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// cacheView is k8s as the manager's cached client sees it (CacheOptions): of the kinds the
// operator makes, only the objects it labelled as its own; everything else as k8s has it.
// Reconcilers under unit test read through it, and through k8s itself as their API reader, so
// that reading a user's object through the cache fails here as it would in the operator.
func cacheView(k8s client.WithWatch) client.WithWatch {
	selectors := map[reflect.Type]labels.Selector{}
	for obj, by := range CacheOptions(nil).ByObject {
		selectors[reflect.TypeOf(obj)] = by.Label
	}
	hidden := func(obj runtime.Object) bool {
		sel, scoped := selectors[reflect.TypeOf(obj)]
		o, ok := obj.(client.Object)
		return scoped && ok && !sel.Matches(labels.Set(o.GetLabels()))
	}
	return interceptor.NewClient(k8s, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if hidden(obj) {
				gvk, err := c.GroupVersionKindFor(obj)
				if err != nil {
					return err
				}
				return apierrors.NewNotFound(gvk.GroupVersion().WithResource(strings.ToLower(gvk.Kind)).GroupResource(), key.Name)
			}
			return nil
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.List(ctx, list, opts...); err != nil {
				return err
			}
			items, err := meta.ExtractList(list)
			if err != nil {
				return err
			}
			return meta.SetList(list, slices.DeleteFunc(items, hidden))
		},
	})
}
