package benchutil

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// PeersVenvEnv names the variable that points at the peers' virtual
// environment (scripts/install-peers.sh makes it).
const PeersVenvEnv = "DEEPGO_PEERS_VENV"

// ErrNoPeers is returned by PeerPython when the peers are not installed; its
// text is what a benchmark prints in place of the peers' results.
var ErrNoPeers = errors.New("not installed: run scripts/install-peers.sh")

// PeersVenv is the peers' virtual environment: $DEEPGO_PEERS_VENV, else
// ~/.cache/deepgo/peers-venv.
func PeersVenv() string {
	if v := os.Getenv(PeersVenvEnv); v != "" {
		return v
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "deepgo", "peers-venv")
}

// PeersStamp is the file scripts/install-peers.sh writes into the venv
// when every peer is installed and DeepSpeed's CPU Adam is built.
const PeersStamp = "deepgo-peers.ok"

// PeerPython returns the venv's interpreter, or an error wrapping ErrNoPeers
// that names what is missing: the venv or its stamp (a run of
// install-peers.sh that did not finish).
func PeerPython() (string, error) {
	venv := PeersVenv()
	for _, f := range []string{filepath.Join(venv, PeersStamp), filepath.Join(venv, "bin", "python")} {
		if st, err := os.Stat(f); err != nil || st.IsDir() {
			return "", fmt.Errorf("%w (no %s; %s sets the venv)", ErrNoPeers, f, PeersVenvEnv)
		}
	}
	return filepath.Join(venv, "bin", "python"), nil
}

// RunPeer runs script (Python source) with the venv's interpreter py,
// args as sys.argv[1:], and env added to this process's environment, and
// decodes the JSON object the script writes last on its standard output
// into v. The script's other output (libraries log to stdout) is passed to
// stderr, so that only the result is parsed. When ctx ends first the peer is
// killed and the error wraps ctx's (a benchmark bounds its peers with a
// deadline: a stuck one must not hang it).
func RunPeer(ctx context.Context, py, script string, env map[string]string, v any, args ...string) error {
	cmd := exec.CommandContext(ctx, py, append([]string{"-c", script}, args...)...)
	cmd.Env = os.Environ()
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	// after a kill, a grandchild still holding the output pipes must not
	// keep Wait waiting
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("peer %s %s: killed: %w", py, strings.Join(args, " "), context.Cause(ctx))
		}
		return fmt.Errorf("peer %s %s: %w", py, strings.Join(args, " "), err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "{") {
			last = lines[i]
			break
		}
	}
	if err := json.Unmarshal([]byte(last), v); err != nil {
		return fmt.Errorf("peer %s %s: its result %q is not the expected JSON: %w", py, strings.Join(args, " "), last, err)
	}
	return nil
}

// Median returns the median of xs (the mean of the middle two for an even
// count); xs is not changed. It is 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// CPUTime is the CPU time (user and system) this process has used so far.
// Divided by the wall time of a section, it is the threads that really ran
// there: below the threads asked for when the machine is shared.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
