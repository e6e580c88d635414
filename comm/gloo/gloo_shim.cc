//go:build gloo

// gloo_shim.cc: the C ABI of gloo_shim.h over Gloo's C++ API (Debian's
// libgloo-dev, TCP transport). Every entry point catches every exception
// and turns it into a status and a message.

#include "gloo_shim.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

namespace {

using ms = std::chrono::milliseconds;

void put(char *err, size_t errlen, const std::string &msg) {
	if (errlen == 0) return;
	size_t n = msg.size() < errlen - 1 ? msg.size() : errlen - 1;
	memcpy(err, msg.data(), n);
	err[n] = 0;
}

bool isTimeout(const std::string &m) {
	return m.find("imeout") != std::string::npos || m.find("Timed out") != std::string::npos;
}

// classify maps the exception being handled to a status.
int classify(char *err, size_t errlen) {
	try {
		throw;
	} catch (const gloo::IoException &e) {
		put(err, errlen, e.what());
		return isTimeout(e.what()) ? DG_GLOO_TIMEOUT : DG_GLOO_IO;
	} catch (const std::exception &e) {
		put(err, errlen, e.what());
		return isTimeout(e.what()) ? DG_GLOO_TIMEOUT : DG_GLOO_ERROR;
	} catch (...) {
		put(err, errlen, "unknown C++ exception");
		return DG_GLOO_ERROR;
	}
}

// GoStore is gloo's rendezvous store over comm.Store (callbacks into Go).
class GoStore : public gloo::rendezvous::Store {
  public:
	explicit GoStore(uintptr_t h) : h_(h) {}

	void set(const std::string &key, const std::vector<char> &data) override {
		char err[512];
		std::vector<char> v(data);
		if (dgGlooStoreSet(h_, const_cast<char *>(key.data()), key.size(), v.data(), v.size(), err, sizeof err) != 0)
			throw gloo::IoException(std::string("store set ") + key + ": " + err);
	}

	std::vector<char> get(const std::string &key) override {
		char err[512];
		char *val = nullptr;
		size_t n = 0;
		if (dgGlooStoreGet(h_, const_cast<char *>(key.data()), key.size(), &val, &n, err, sizeof err) != 0)
			throw gloo::IoException(std::string("store get ") + key + ": " + err);
		std::vector<char> out(val, val + n);
		free(val);
		return out;
	}

	void wait(const std::vector<std::string> &keys) override { wait(keys, ms(-1)); }

	void wait(const std::vector<std::string> &keys, const ms &timeout) override {
		std::string joined;
		for (auto &k : keys) {
			joined += k;
			joined.push_back(0);
		}
		char err[512];
		if (dgGlooStoreWait(h_, const_cast<char *>(joined.data()), joined.size(), timeout.count(), err, sizeof err) != 0)
			throw gloo::IoException(std::string("store wait: ") + err);
	}

  private:
	uintptr_t h_;
};

struct Dev {
	std::shared_ptr<gloo::transport::Device> dev;
};

using Buffers = std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>;

struct Ctx {
	std::shared_ptr<gloo::rendezvous::Context> ctx;
	// A failed or aborted exchange's buffers and their memory: Gloo keeps
	// its posted operations, so a peer may still write into them; they go
	// after the connections close, in dg_gloo_free. Under keptMu: Send and
	// Recv exchange beside the collectives, so two may abort at once.
	std::mutex keptMu;
	Buffers kept;
	std::vector<std::unique_ptr<char[]>> keptMem;
};

// Abort lets another thread interrupt an exchange's waits: Gloo's
// UnboundBuffer::abortWait* returns the wait (or the next one) false.
struct Abort {
	std::mutex mu;
	bool aborted = false;
	std::vector<gloo::transport::UnboundBuffer *> live; // while an exchange waits
};

// Registration holds an exchange's buffers in its Abort for the length of
// the waits; aborted() says whether dg_gloo_abort came first.
class Registration {
  public:
	Registration(Abort *a, const Buffers &recv, const Buffers &send) : a_(a) {
		if (a_ == nullptr) return;
		std::lock_guard<std::mutex> g(a_->mu);
		for (auto &b : recv) a_->live.push_back(b.get());
		for (auto &b : send)
			if (b) a_->live.push_back(b.get());
		early_ = a_->aborted;
	}
	~Registration() {
		if (a_ == nullptr) return;
		std::lock_guard<std::mutex> g(a_->mu);
		a_->live.clear();
	}
	bool aborted() const { return early_; }

  private:
	Abort *a_;
	bool early_ = false;
};

std::shared_ptr<gloo::Context> ctxOf(void *c) { return static_cast<Ctx *>(c)->ctx; }

ms timeoutOf(int64_t t) { return ms(t > 0 ? t : 1); }

using ReduceFn = void (*)(void *, const void *, const void *, size_t);

template <typename T> ReduceFn reduceFn(int op) {
	ReduceFn sum = &gloo::sum<T>, mx = &gloo::max<T>, mn = &gloo::min<T>;
	return op == 1 ? mx : op == 2 ? mn : sum;
}

template <typename Opts> void setReduce(Opts &o, void *buf, size_t count, int dtype, int op) {
	switch (dtype) {
	case 0:
		o.template setOutput<float>(static_cast<float *>(buf), count);
		o.setReduceFunction(reduceFn<float>(op));
		break;
	case 1:
		o.template setOutput<int32_t>(static_cast<int32_t *>(buf), count);
		o.setReduceFunction(reduceFn<int32_t>(op));
		break;
	default:
		o.template setOutput<int64_t>(static_cast<int64_t *>(buf), count);
		o.setReduceFunction(reduceFn<int64_t>(op));
		break;
	}
}

} // namespace

extern "C" {

int dg_gloo_device(const char *hostname, const char *iface, void **dev, char *err, size_t errlen) {
	try {
		gloo::transport::tcp::attr attr;
		if (hostname && *hostname) attr.hostname = hostname;
		if (iface && *iface) attr.iface = iface;
		auto d = new Dev{gloo::transport::tcp::CreateDevice(attr)};
		*dev = d;
		return DG_GLOO_OK;
	} catch (...) {
		return classify(err, errlen);
	}
}

void dg_gloo_device_free(void *dev) { delete static_cast<Dev *>(dev); }

int dg_gloo_connect(void *dev, uintptr_t store, int rank, int size, int64_t timeout_ms, void **ctx, char *err,
                    size_t errlen) {
	try {
		auto c = std::make_shared<gloo::rendezvous::Context>(rank, size);
		c->setTimeout(timeoutOf(timeout_ms));
		GoStore s(store);
		c->connectFullMesh(s, static_cast<Dev *>(dev)->dev);
		*ctx = new Ctx{c};
		return DG_GLOO_OK;
	} catch (...) {
		return classify(err, errlen);
	}
}

void dg_gloo_free(void *ctx) {
	auto c = static_cast<Ctx *>(ctx);
	bool kept;
	{
		std::lock_guard<std::mutex> g(c->keptMu);
		kept = !c->kept.empty();
	}
	if (kept) {
		// no peer may write into the kept buffers once they are gone
		try {
			c->ctx->closeConnections();
		} catch (...) {
		}
	}
	delete c;
}

void dg_gloo_close(void *ctx) {
	try {
		ctxOf(ctx)->closeConnections();
	} catch (...) {
	}
}

int dg_gloo_exchange(void *ctx, uint64_t slot, const void *mine, size_t n, const int *peers, int npeers,
                     void *theirs, int *from, int *status, int64_t timeout_ms, void *abort, char *err,
                     size_t errlen) {
	auto holder = static_cast<Ctx *>(ctx);
	auto c = holder->ctx;
	auto deadline = std::chrono::steady_clock::now() + timeoutOf(timeout_ms);
	std::vector<int> srcs(peers, peers + npeers);
	Buffers recv, send;
	int rc = DG_GLOO_OK;
	for (int k = 0; k < npeers; k++) {
		status[k] = DG_GLOO_TIMEOUT;
		from[k] = -1;
	}
	// The buffers are this call's own memory, not the caller's: a failed
	// or aborted call leaves them posted (see Ctx::kept).
	std::unique_ptr<char[]> mem(new (std::nothrow) char[n * (size_t)(npeers + 1)]);
	if (!mem) {
		put(err, errlen, "exchange: out of memory");
		return DG_GLOO_ERROR;
	}
	char *in = mem.get() + n;
	memcpy(mem.get(), mine, n);
	// Any way out but success leaves receives (and maybe sends) posted with
	// pairs to live peers still open until the caller closes them: keep
	// the buffers and their memory with the group (see Ctx::kept).
	auto keep = [&]() {
		std::lock_guard<std::mutex> g(holder->keptMu);
		for (auto &b : recv) holder->kept.push_back(std::move(b));
		for (auto &b : send)
			if (b) holder->kept.push_back(std::move(b));
		holder->keptMem.push_back(std::move(mem));
	};
	// Arrivals fill the receive buffers in posting order, whoever sends:
	// when buffer i times out, exactly the peers not yet heard from are
	// missing (a timeout closes every pair, so nothing is waited on after).
	try {
		for (int k = 0; k < npeers; k++) {
			recv.push_back(c->createUnboundBuffer(in + k * n, n));
			recv.back()->recv(srcs, slot);
		}
	} catch (...) {
		int st = classify(err, errlen);
		keep();
		return st;
	}
	for (int k = 0; k < npeers; k++) {
		try {
			send.push_back(c->createUnboundBuffer(mem.get(), n));
			send.back()->send(peers[k], slot);
		} catch (...) {
			if ((int)send.size() == k) send.push_back(nullptr); // one entry per peer
			status[k] = classify(err, errlen);
			rc = status[k];
		}
	}
	if (rc != DG_GLOO_OK) { // a peer is known dead: no need to wait
		keep();
		return rc;
	}
	bool aborted = false;
	{
		Registration reg(static_cast<Abort *>(abort), recv, send);
		aborted = reg.aborted();
		for (int i = 0; i < npeers && !aborted; i++) {
			int src = -1;
			try {
				auto left = std::chrono::ceil<ms>(deadline - std::chrono::steady_clock::now());
				if (!recv[i]->waitRecv(&src, left.count() > 0 ? left : ms(1))) {
					aborted = true;
					break;
				}
			} catch (...) {
				int st = classify(err, errlen);
				if (rc == DG_GLOO_OK) rc = st;
				break;
			}
			from[i] = src;
			for (int k = 0; k < npeers; k++)
				if (peers[k] == src && status[k] == DG_GLOO_TIMEOUT) status[k] = DG_GLOO_OK;
		}
		for (int k = 0; k < npeers && rc == DG_GLOO_OK && !aborted; k++) {
			if (!send[k]) continue;
			try {
				auto left = std::chrono::ceil<ms>(deadline - std::chrono::steady_clock::now());
				if (!send[k]->waitSend(nullptr, left.count() > 0 ? left : ms(1))) aborted = true;
			} catch (...) {
				status[k] = classify(err, errlen);
				rc = status[k];
			}
		}
	}
	if (aborted) {
		keep();
		put(err, errlen, "exchange aborted");
		return DG_GLOO_ABORTED;
	}
	if (rc != DG_GLOO_OK) {
		keep();
		return rc;
	}
	memcpy(theirs, in, n * (size_t)npeers);
	return DG_GLOO_OK;
}

void *dg_gloo_abort_new(void) { return new (std::nothrow) Abort; }

void dg_gloo_abort(void *abort) {
	auto a = static_cast<Abort *>(abort);
	std::lock_guard<std::mutex> g(a->mu);
	a->aborted = true;
	for (auto b : a->live) {
		b->abortWaitRecv();
		b->abortWaitSend();
	}
}

void dg_gloo_abort_free(void *abort) { delete static_cast<Abort *>(abort); }

int dg_gloo_send(void *ctx, uint64_t slot, const void *buf, size_t n, int peer, int64_t timeout_ms, char *err,
                 size_t errlen) {
	try {
		auto b = ctxOf(ctx)->createUnboundBuffer(const_cast<void *>(buf), n);
		b->send(peer, slot);
		b->waitSend(timeoutOf(timeout_ms));
		return DG_GLOO_OK;
	} catch (...) {
		return classify(err, errlen);
	}
}

int dg_gloo_recv(void *ctx, uint64_t slot, void *buf, size_t n, int peer, int64_t timeout_ms, char *err,
                 size_t errlen) {
	try {
		auto b = ctxOf(ctx)->createUnboundBuffer(buf, n);
		b->recv(peer, slot);
		b->waitRecv(timeoutOf(timeout_ms));
		return DG_GLOO_OK;
	} catch (...) {
		return classify(err, errlen);
	}
}

int dg_gloo_allreduce(void *ctx, uint32_t tag, void *buf, size_t count, int dtype, int op, int64_t timeout_ms,
                      char *err, size_t errlen) {
	try {
		gloo::AllreduceOptions o(ctxOf(ctx));
		setReduce(o, buf, count, dtype, op);
		o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
		o.setTag(tag);
		o.setTimeout(timeoutOf(timeout_ms));
		gloo::allreduce(o);
		return DG_GLOO_OK;
	} catch (...) {
		return classify(err, errlen);
	}
}

int dg_gloo_reduce(void *ctx, uint32_t tag, void *buf, size_t count, int dtype, int op, int root,
                   int64_t timeout_ms, char *err, size_t errlen) {
	try {
		gloo::ReduceOptions o(ctxOf(ctx));
		setReduce(o, buf, count, dtype, op);
		o.setRoot(root);
		o.setTag(tag);
		o.setTimeout(timeoutOf(timeout_ms));
		gloo::reduce(o);
		return DG_GLOO_OK;
	} catch (...) {
		return classify(err, errlen);
	}
}

int dg_gloo_allgather(void *ctx, uint32_t tag, const void *in, void *out, size_t n, int64_t timeout_ms, char *err,
                      size_t errlen) {
	try {
		auto c = ctxOf(ctx);
		gloo::AllgatherOptions o(c);
		std::vector<char> copy;
		if (!in) { // in place: Gloo copies the input into the output first
			char *mine = static_cast<char *>(out) + size_t(c->rank) * n;
			copy.assign(mine, mine + n);
			in = copy.data();
		}
		o.setInput<char>(static_cast<char *>(const_cast<void *>(in)), n);
		o.setOutput<char>(static_cast<char *>(out), n * size_t(c->size));
		o.setTag(tag);
		o.setTimeout(timeoutOf(timeout_ms));
		gloo::allgather(o);
		return DG_GLOO_OK;
	} catch (...) {
		return classify(err, errlen);
	}
}

int dg_gloo_broadcast(void *ctx, uint32_t tag, void *buf, size_t n, int root, int64_t timeout_ms, char *err,
                      size_t errlen) {
	try {
		gloo::BroadcastOptions o(ctxOf(ctx));
		o.setOutput<char>(static_cast<char *>(buf), n);
		o.setRoot(root);
		o.setTag(tag);
		o.setTimeout(timeoutOf(timeout_ms));
		gloo::broadcast(o);
		return DG_GLOO_OK;
	} catch (...) {
		return classify(err, errlen);
	}
}

int dg_gloo_alltoall(void *ctx, uint32_t tag, const void *in, void *out, size_t n, int64_t timeout_ms, char *err,
                     size_t errlen) {
	try {
		gloo::AlltoallOptions o(ctxOf(ctx));
		o.setInput<char>(static_cast<char *>(const_cast<void *>(in)), n);
		o.setOutput<char>(static_cast<char *>(out), n);
		o.setTag(tag);
		o.setTimeout(timeoutOf(timeout_ms));
		gloo::alltoall(o);
		return DG_GLOO_OK;
	} catch (...) {
		return classify(err, errlen);
	}
}

} // extern "C"
