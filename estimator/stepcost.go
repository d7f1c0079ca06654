package estimator

import (
	"math"
	"time"
)

// stepRow is one engine's busy window: steps, computed prefill tokens and
// decode tokens, each per second.
type stepRow struct {
	s, d, g float64
	end     time.Time
	pod     podKey
}

// stepCost is vLLM's step-time model fitted on busy windows:
//
//	step time = overhead + prefill tokens · perPrefill + decode tokens · perDecode
//
// so that an engine busy for a whole window satisfies
// 1 = overhead·S + perPrefill·D + perDecode·G per second.
type stepCost struct {
	overhead, perPrefill, perDecode float64
	// cov is the coefficients' covariance (residual variance × (XᵀX)⁻¹).
	cov  [3][3]float64
	rows int
}

// fitStepCost solves the least-squares fit of 1 = o·S + tp·D + td·G through
// the origin. It reports false when the windows do not tell the three
// costs apart (e.g. only full-budget steps, where S·B = D + G) or the fit is
// not physical.
func fitStepCost(rows []stepRow) (stepCost, bool) {
	n := len(rows)
	if n < 4 {
		return stepCost{}, false
	}
	// Scale the columns to unit RMS so the normal equations stay well conditioned.
	var scale [3]float64
	for _, r := range rows {
		scale[0] += r.s * r.s
		scale[1] += r.d * r.d
		scale[2] += r.g * r.g
	}
	for i := range scale {
		scale[i] = math.Sqrt(scale[i] / float64(n))
		if !(scale[i] > 0) || !finite(scale[i]) {
			return stepCost{}, false
		}
	}
	var xtx [3][3]float64
	var xty [3]float64
	for _, r := range rows {
		x := [3]float64{r.s / scale[0], r.d / scale[1], r.g / scale[2]}
		for i := 0; i < 3; i++ {
			for j := 0; j < 3; j++ {
				xtx[i][j] += x[i] * x[j]
			}
			xty[i] += x[i]
		}
	}
	inv, ok := invert3(xtx)
	if !ok {
		return stepCost{}, false
	}
	var b [3]float64
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			b[i] += inv[i][j] * xty[j]
		}
	}
	var rss float64
	for _, r := range rows {
		pred := b[0]*r.s/scale[0] + b[1]*r.d/scale[1] + b[2]*r.g/scale[2]
		rss += (1 - pred) * (1 - pred)
	}
	sigma2 := rss / float64(max(n-3, 1))
	sc := stepCost{overhead: b[0] / scale[0], perPrefill: b[1] / scale[1], perDecode: b[2] / scale[2], rows: n}
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			sc.cov[i][j] = sigma2 * inv[i][j] / (scale[i] * scale[j])
		}
	}
	if sc.overhead < 0 || !(sc.perPrefill > 0) || sc.perDecode < 0 {
		return sc, false
	}
	return sc, true
}

// nominal is the idle engine's full-chunk rate B / (overhead + B·perPrefill)
// and its standard deviation by the delta method.
func (c stepCost) nominal(budget float64) (value, sd float64) {
	den := c.overhead + budget*c.perPrefill
	value = budget / den
	// ∂N/∂o = −B/den², ∂N/∂tp = −B²/den².
	g0, g1 := -budget/(den*den), -budget*budget/(den*den)
	v := g0*g0*c.cov[0][0] + 2*g0*g1*c.cov[0][1] + g1*g1*c.cov[1][1]
	return value, math.Sqrt(math.Max(v, 0))
}

// invert3 inverts a symmetric 3×3 matrix; false when it is (nearly) singular.
func invert3(m [3][3]float64) ([3][3]float64, bool) {
	var inv [3][3]float64
	c00 := m[1][1]*m[2][2] - m[1][2]*m[2][1]
	c01 := m[1][2]*m[2][0] - m[1][0]*m[2][2]
	c02 := m[1][0]*m[2][1] - m[1][1]*m[2][0]
	det := m[0][0]*c00 + m[0][1]*c01 + m[0][2]*c02
	trace := m[0][0] + m[1][1] + m[2][2]
	// Relative to the scale of the (unit-RMS) columns: a determinant this
	// small means two directions are (almost) the same.
	if !(math.Abs(det) > 1e-9*trace*trace*trace) {
		return inv, false
	}
	inv[0][0] = c00 / det
	inv[0][1] = (m[0][2]*m[2][1] - m[0][1]*m[2][2]) / det
	inv[0][2] = (m[0][1]*m[1][2] - m[0][2]*m[1][1]) / det
	inv[1][0] = c01 / det
	inv[1][1] = (m[0][0]*m[2][2] - m[0][2]*m[2][0]) / det
	inv[1][2] = (m[0][2]*m[1][0] - m[0][0]*m[1][2]) / det
	inv[2][0] = c02 / det
	inv[2][1] = (m[0][1]*m[2][0] - m[0][0]*m[2][1]) / det
	inv[2][2] = (m[0][0]*m[1][1] - m[0][1]*m[1][0]) / det
	return inv, true
}
