package backend

import "context"

type ctxKey struct{}

// NewContext returns a copy of ctx that carries b. An engine passes such a
// context to every module's Forward and Backward and to the loss, so that
// a module computes on the engine's backend (its device and thread pool)
// without being handed one separately.
func NewContext(ctx context.Context, b Backend) context.Context {
	return context.WithValue(ctx, ctxKey{}, b)
}

// FromContext returns the backend ctx carries, if any.
func FromContext(ctx context.Context) (Backend, bool) {
	b, ok := ctx.Value(ctxKey{}).(Backend)
	return b, ok && b != nil
}
