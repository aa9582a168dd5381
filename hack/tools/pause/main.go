// Command pause holds a pod's namespaces open: it is the sandbox container's only process. As
// PID 1 of a pod that shares its process namespace it also reaps orphaned children, which would
// otherwise stay zombies. It exits cleanly on SIGINT or SIGTERM, as the upstream pause does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
