package comm

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// JobSecret is the per-job secret every process of a job shares
// (DEEPGO_JOB_SECRET; `deepgo launch` makes 32 random bytes, hex-encoded).
// It keys the store's challenge–response handshake and never crosses the
// wire. It prints as "[redacted]" so that logging an Env cannot leak it.
type JobSecret string

// MinSecretLen is the shortest DEEPGO_JOB_SECRET accepted.
const MinSecretLen = 16

// String hides the secret.
func (s JobSecret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString hides the secret from %#v too.
func (s JobSecret) GoString() string { return strconv.Quote(s.String()) }

// StoreLimits bound what one StoreServer holds, so that no client can grow
// it without bound. A zero field takes its default (the Default* constants).
type StoreLimits struct {
	// Conns is the most authenticated connections at once; one more is
	// refused (the client retries until its deadline).
	// DEEPGO_STORE_MAX_CONNS.
	Conns int
	// Pending is the most connections still handshaking at once; more are
	// refused at once. DEEPGO_STORE_MAX_PENDING.
	Pending int
	// Keys is the most keys held. DEEPGO_STORE_MAX_KEYS.
	Keys int
	// Bytes is the most key plus value bytes held. DEEPGO_STORE_MAX_BYTES.
	Bytes int64
	// Waiters is the most Gets waiting for a key at once.
	// DEEPGO_STORE_MAX_WAITERS.
	Waiters int
	// Handshake is how long a new connection has to authenticate.
	// DEEPGO_STORE_HANDSHAKE_TIMEOUT.
	Handshake time.Duration
	// Idle drops an authenticated connection that sends nothing for this
	// long (0: never; a client redials transparently).
	// DEEPGO_STORE_IDLE_TIMEOUT.
	Idle time.Duration
}

// The default limits: generous for a job of a thousand ranks (a rank holds
// one to three connections and writes a few small keys), small enough that a
// flood cannot exhaust the rank-0 process.
const (
	DefaultStoreConns     = 1024
	DefaultStorePending   = 64
	DefaultStoreKeys      = 1 << 16
	DefaultStoreBytes     = 256 << 20
	DefaultStoreWaiters   = 1024
	DefaultStoreHandshake = 10 * time.Second
)

func (l StoreLimits) withDefaults() StoreLimits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.Conns, DefaultStoreConns)
	def(&l.Pending, DefaultStorePending)
	def(&l.Keys, DefaultStoreKeys)
	def(&l.Waiters, DefaultStoreWaiters)
	if l.Bytes <= 0 {
		l.Bytes = DefaultStoreBytes
	}
	if l.Handshake <= 0 {
		l.Handshake = DefaultStoreHandshake
	}
	return l
}

// StoreOptions configure a StoreServer (ListenStoreOpts).
type StoreOptions struct {
	// Secret is the job secret clients must prove. Empty: clients prove the
	// empty secret, which is allowed only on a loopback address (tests, one
	// machine) unless AllowInsecure.
	Secret JobSecret
	// AllowInsecure serves without a secret on a non-loopback address
	// (DEEPGO_STORE_INSECURE=1), with a warning: anyone who reaches the
	// port can then join the job's rendezvous.
	AllowInsecure bool
	// Limits bound the server's resources.
	Limits StoreLimits
	// Log receives the listening address, refused connections and
	// warnings (nil: os.Stderr).
	Log io.Writer
}

// storeEnvLimits reads the DEEPGO_STORE_* variables into l; an unparsable
// or negative value is an error naming the variable.
func storeEnvLimits(get func(string) string) (l StoreLimits, insecure bool, err error) {
	ints := []struct {
		name string
		dst  *int
	}{
		{"DEEPGO_STORE_MAX_CONNS", &l.Conns}, {"DEEPGO_STORE_MAX_PENDING", &l.Pending},
		{"DEEPGO_STORE_MAX_KEYS", &l.Keys}, {"DEEPGO_STORE_MAX_WAITERS", &l.Waiters},
	}
	for _, v := range ints {
		s := strings.TrimSpace(get(v.name))
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return l, false, fmt.Errorf("comm: %s=%q: want an integer >= 1", v.name, s)
		}
		*v.dst = n
	}
	if s := strings.TrimSpace(get("DEEPGO_STORE_MAX_BYTES")); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 {
			return l, false, fmt.Errorf("comm: DEEPGO_STORE_MAX_BYTES=%q: want a byte count >= 1", s)
		}
		l.Bytes = n
	}
	durs := []struct {
		name string
		dst  *time.Duration
	}{{"DEEPGO_STORE_HANDSHAKE_TIMEOUT", &l.Handshake}, {"DEEPGO_STORE_IDLE_TIMEOUT", &l.Idle}}
	for _, v := range durs {
		s := strings.TrimSpace(get(v.name))
		if s == "" {
			continue
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return l, false, fmt.Errorf("comm: %s=%q: want a positive Go duration such as \"10s\"", v.name, s)
		}
		*v.dst = d
	}
	if s := strings.TrimSpace(get("DEEPGO_STORE_INSECURE")); s != "" {
		insecure, err = strconv.ParseBool(s)
		if err != nil {
			return l, false, fmt.Errorf("comm: DEEPGO_STORE_INSECURE=%q: want 1 or 0", s)
		}
	}
	return l, insecure, nil
}

// jobSecretFrom reads DEEPGO_JOB_SECRET: empty, or at least MinSecretLen
// characters (the value is not echoed in the error).
func jobSecretFrom(get func(string) string) (JobSecret, error) {
	s := strings.TrimSpace(get("DEEPGO_JOB_SECRET"))
	if s != "" && len(s) < MinSecretLen {
		return "", fmt.Errorf("comm: DEEPGO_JOB_SECRET has %d characters: want at least %d (deepgo launch makes 64 hex digits)", len(s), MinSecretLen)
	}
	return JobSecret(s), nil
}
