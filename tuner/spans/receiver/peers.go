package receiver

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxPeers bounds the peers tracked; beyond it, idle peers are forgotten
// and, if none is idle, new peers share one bucket.
const maxPeers = 1024

// peerLimiter holds one token bucket (in spans) per peer address.
type peerLimiter struct {
	limit rate.Limit
	burst int

	mu       sync.Mutex
	peers    map[string]*peerEntry
	overflow *rate.Limiter
}

type peerEntry struct {
	lim  *rate.Limiter
	seen time.Time
}

func newPeerLimiter(perSecond float64, burst int) *peerLimiter {
	return &peerLimiter{limit: rate.Limit(perSecond), burst: burst, peers: map[string]*peerEntry{},
		overflow: rate.NewLimiter(rate.Limit(perSecond), burst)}
}

// allow takes n spans from the peer's bucket. A request larger than the
// burst is allowed once the bucket is full (it cannot ever fit otherwise).
func (p *peerLimiter) allow(addr string, n int, now time.Time) bool {
	p.mu.Lock()
	lim := p.limiter(addr, now)
	p.mu.Unlock()
	if n > p.burst {
		if lim.TokensAt(now) < float64(p.burst) {
			return false
		}
		n = p.burst
	}
	return lim.AllowN(now, n)
}

func (p *peerLimiter) limiter(addr string, now time.Time) *rate.Limiter {
	if e, ok := p.peers[addr]; ok {
		e.seen = now
		return e.lim
	}
	if len(p.peers) >= maxPeers {
		for k, e := range p.peers {
			if now.Sub(e.seen) > time.Minute {
				delete(p.peers, k)
			}
		}
		if len(p.peers) >= maxPeers {
			return p.overflow
		}
	}
	e := &peerEntry{lim: rate.NewLimiter(p.limit, p.burst), seen: now}
	p.peers[addr] = e
	return e.lim
}
