package controllers

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
)

// postEvent posts an event about obj, the one way the three reconcilers do; a reconciler built
// without a recorder (unit tests) posts none.
func postEvent(recorder events.EventRecorder, obj runtime.Object, eventType, reason, action, note string, args ...any) {
	if recorder != nil {
		recorder.Eventf(obj, nil, eventType, reason, action, note, args...)
	}
}
