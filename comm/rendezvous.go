package comm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// Rendezvous connects this process to the job's store: rank 0 serves it on
// env.StoreAddr() with env.StoreOptions() (server is non-nil only there;
// close it last), and every rank, rank 0 included, dials it with
// env.Secret, retrying until ctx ends. The store then carries bootstrap
// data such as the NCCL unique id.
func Rendezvous(ctx context.Context, env Env) (store *Store, server *StoreServer, err error) {
	if env.Rank == 0 {
		server, err = ListenStoreOpts(env.StoreAddr(), env.StoreOptions())
		if err != nil {
			return nil, nil, err
		}
	}
	store, err = DialStoreOpts(ctx, env.StoreAddr(), env.Secret)
	if err != nil {
		if server != nil {
			server.Close()
		}
		return nil, nil, err
	}
	return store, server, nil
}

// AgreeOnConfig checks that all size ranks hold the same bytes under the
// agreement name key (use a fresh key per agreement, e.g. "config/step0"):
// each rank publishes the SHA-256 of data and reads everyone's. The hashes
// are write-once (Store.SetOnce): a key used twice in one store
// generation, or a rank's hash written by someone else first, fails with
// ErrRefused naming the key. On
// disagreement every rank gets an *Error wrapping ErrMismatch whose Ranks
// are those outside the largest group of equal hashes (ties: the group
// holding rank 0), with each distinct hash and its ranks in the message.
func AgreeOnConfig(ctx context.Context, s *Store, rank, size int, key string, data []byte) error {
	sum := sha256.Sum256(data)
	mine := hex.EncodeToString(sum[:])
	if err := s.SetOnce(ctx, fmt.Sprintf("%s/sha256/%d", key, rank), []byte(mine)); err != nil {
		return err
	}
	byHash := map[string][]int{}
	for r := range size {
		v, err := s.Get(ctx, fmt.Sprintf("%s/sha256/%d", key, r))
		if err != nil {
			return &Error{Op: "AgreeOnConfig", Group: key, Rank: rank, Ranks: []int{r},
				Err: fmt.Errorf("rank %d did not publish its hash: %w", r, err)}
		}
		byHash[string(v)] = append(byHash[string(v)], r)
	}
	if len(byHash) == 1 {
		return nil
	}
	hashes := make([]string, 0, len(byHash))
	for h := range byHash {
		hashes = append(hashes, h)
	}
	sort.Slice(hashes, func(i, j int) bool {
		a, b := byHash[hashes[i]], byHash[hashes[j]]
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a[0] < b[0]
	})
	var bad []int
	var desc []string
	for i, h := range hashes {
		desc = append(desc, fmt.Sprintf("ranks %v hold sha256 %s", byHash[h], h[:12]))
		if i > 0 {
			bad = append(bad, byHash[h]...)
		}
	}
	sort.Ints(bad)
	return &Error{Op: "AgreeOnConfig", Group: key, Rank: rank, Ranks: bad,
		Err: fmt.Errorf("%w: %s", ErrMismatch, strings.Join(desc, "; "))}
}
