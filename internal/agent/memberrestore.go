package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/etcd-database/etcd-operator/internal/jobspec"
)

// A member restored in its own pod runs a restore Job's three steps in two of its pod's init
// containers (jobspec says how). The pod is made again whenever it is lost, and its init
// containers run again each time: neither step touches a data directory that exists, and the
// fetch then reports again what it recorded when it staged the data, so that the operator
// reads the same report from whichever pod ran last.

// RunMemberRestoreFetch is `manager agent member-restore-fetch`, in the agent's image: leave
// the agent's binary for the next container, then fetch and check the snapshot, unless the
// member's data is already installed.
func RunMemberRestoreFetch(ctx context.Context) int {
	report := Report{}
	result, err := memberRestoreFetch(ctx)
	if err != nil {
		report.Error, report.Permanent, report.Unrestorable = err.Error(), isPermanent(err), IsUnrestorable(err)
	} else {
		report.Restore = &result
	}
	return finish(report)
}

// RunMemberRestoreInstall is `manager agent member-restore-install ETCDUTL ARGS...`, in the
// target etcd image: run its etcdutl, then install what it restored, unless the member's data
// is already installed.
func RunMemberRestoreInstall(ctx context.Context, etcdutl []string) int {
	report := Report{}
	if err := memberRestoreInstall(ctx, etcdutl); err != nil {
		report.Error, report.Permanent = err.Error(), isPermanent(err)
	}
	return finish(report)
}

func memberRestoreFetch(ctx context.Context) (RestoreResult, error) {
	if err := copyExecutable(podPaths.agentBinary); err != nil {
		return RestoreResult{}, fmt.Errorf("leave the agent's binary for the etcd image's container: %w", err)
	}
	installed, err := exists(memberPath(jobspec.MemberDataDir))
	if err != nil {
		return RestoreResult{}, err
	}
	if installed {
		return readRestoredRecord()
	}
	result, err := fetchFromEnvironment(ctx, memberPath(jobspec.RestoreStagingDir))
	if err != nil {
		return RestoreResult{}, err
	}
	// Written before any data is installed: a data directory with no record beside it was
	// not installed by this restore.
	return result, writeFileAtomically(memberPath(jobspec.RestoredRecord), 0o600, true, func(w io.Writer) error {
		return json.NewEncoder(w).Encode(result)
	})
}

func memberRestoreInstall(ctx context.Context, etcdutl []string) error {
	if len(etcdutl) == 0 {
		return permanentError{errors.New("no etcdutl command to run")}
	}
	dataDir := memberPath(jobspec.MemberDataDir)
	if installed, err := exists(dataDir); err != nil || installed {
		return err
	}
	staged := memberPath(jobspec.StagedDataDir)
	// etcdutl refuses a data directory that exists, as one a run cut short may have left.
	if err := os.RemoveAll(staged); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, etcdutl[0], etcdutl[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w; its output is in this container's log", strings.Join(etcdutl[:min(3, len(etcdutl))], " "), err)
	}
	return Install(staged, dataDir, memberPath(jobspec.RestoreStagingDir))
}

// readRestoredRecord is what the fetch that staged the installed data reported.
func readRestoredRecord() (RestoreResult, error) {
	file := memberPath(jobspec.RestoredRecord)
	raw, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return RestoreResult{}, permanentError{fmt.Errorf("%s holds data with no record of a restore beside it (%s): it was not installed by a restore, and is never used as one",
			memberPath(jobspec.MemberDataDir), file)}
	}
	if err != nil {
		return RestoreResult{}, err
	}
	var result RestoreResult
	if err := json.Unmarshal(raw, &result); err != nil {
		return RestoreResult{}, permanentError{fmt.Errorf("%s: %w", file, err)}
	}
	return result, nil
}

// memberPath is a path of the member's claim, under the mount the agent was given.
func memberPath(path string) string {
	return filepath.Join(podPaths.memberMount, strings.TrimPrefix(path, jobspec.MemberDataMount))
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// copyExecutable copies the running binary to dst, whole or not at all. Not synced: dst is in
// the pod's emptyDir, which a node's crash loses together with the pod's run, and the next
// run copies it again (syncing its 90 MB cost a restore a second).
func copyExecutable(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	return writeFileAtomically(dst, 0o755, false, func(w io.Writer) error {
		_, err := io.Copy(w, src)
		return err
	})
}

// writeFileAtomically writes path through a temporary file and a rename, synced first when
// durable.
func writeFileAtomically(path string, mode os.FileMode, durable bool, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil && durable {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}
