package nn

// A float64 Go reference of every layer and of GPT, forward and backward,
// written from the formulas and independent of the C kernels. The tests
// check the float32 C path against it, and it against finite differences.

import "math"

func refLinear(x, w, b []float64, n, in, out int) []float64 {
	y := make([]float64, n*out)
	for r := 0; r < n; r++ {
		for o := 0; o < out; o++ {
			s := 0.0
			if b != nil {
				s = b[o]
			}
			for i := 0; i < in; i++ {
				s += x[r*in+i] * w[o*in+i]
			}
			y[r*out+o] = s
		}
	}
	return y
}

func refLinearBack(dx, dw, db, dy, x, w []float64, n, in, out int) {
	for r := 0; r < n; r++ {
		for o := 0; o < out; o++ {
			d := dy[r*out+o]
			if db != nil {
				db[o] += d
			}
			for i := 0; i < in; i++ {
				if dx != nil {
					dx[r*in+i] += d * w[o*in+i]
				}
				dw[o*in+i] += d * x[r*in+i]
			}
		}
	}
}

func refLN(x, w, b []float64, n, c int) (y, mean, rstd []float64) {
	y, mean, rstd = make([]float64, n*c), make([]float64, n), make([]float64, n)
	for r := 0; r < n; r++ {
		m, v := 0.0, 0.0
		for i := 0; i < c; i++ {
			m += x[r*c+i]
		}
		m /= float64(c)
		for i := 0; i < c; i++ {
			v += (x[r*c+i] - m) * (x[r*c+i] - m)
		}
		v /= float64(c)
		s := 1 / math.Sqrt(v+1e-5)
		for i := 0; i < c; i++ {
			y[r*c+i] = (x[r*c+i]-m)*s*w[i] + b[i]
		}
		mean[r], rstd[r] = m, s
	}
	return
}

func refLNBack(dx, dw, db, dy, x, w, mean, rstd []float64, n, c int) {
	for r := 0; r < n; r++ {
		a, bb := 0.0, 0.0
		for i := 0; i < c; i++ {
			nm := (x[r*c+i] - mean[r]) * rstd[r]
			dn := dy[r*c+i] * w[i]
			a += dn
			bb += dn * nm
			dw[i] += nm * dy[r*c+i]
			db[i] += dy[r*c+i]
		}
		a /= float64(c)
		bb /= float64(c)
		for i := 0; i < c; i++ {
			nm := (x[r*c+i] - mean[r]) * rstd[r]
			dx[r*c+i] += (dy[r*c+i]*w[i] - a - nm*bb) * rstd[r]
		}
	}
}

const geluK = 0.7978845608028654

func refGelu(x []float64) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = 0.5 * v * (1 + math.Tanh(geluK*(v+0.044715*v*v*v)))
	}
	return y
}

func refGeluBack(dx, x, dy []float64) {
	for i, v := range x {
		th := math.Tanh(geluK * (v + 0.044715*v*v*v))
		dx[i] += (0.5*(1+th) + 0.5*v*(1-th*th)*geluK*(1+3*0.044715*v*v)) * dy[i]
	}
}

func firstKey(q, w int) int {
	if w > 0 && q-w+1 > 0 {
		return q - w + 1
	}
	return 0
}

// refSpan is the saved row length of windowed attention: the last W keys,
// or all T without a window (W <= 0) or when W >= T.
func refSpan(T, W int) int {
	if W > 0 && W < T {
		return W
	}
	return T
}

func refAttn(qkv []float64, B, T, NH, HS, W int) (out, att []float64) {
	C := NH * HS
	S := refSpan(T, W)
	out, att = make([]float64, B*T*C), make([]float64, B*NH*T*S)
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			for q := 0; q < T; q++ {
				k0 := firstKey(q, W)
				row := att[((b*NH+h)*T+q)*S-k0:][:k0+S] // row[k]: key k at slot k-k0
				mx := math.Inf(-1)
				for k := k0; k <= q; k++ {
					s := 0.0
					for i := 0; i < HS; i++ {
						s += qkv[(b*T+q)*3*C+h*HS+i] * qkv[(b*T+k)*3*C+C+h*HS+i]
					}
					row[k] = s / math.Sqrt(float64(HS))
					mx = math.Max(mx, row[k])
				}
				sum := 0.0
				for k := k0; k <= q; k++ {
					row[k] = math.Exp(row[k] - mx)
					sum += row[k]
				}
				for k := k0; k <= q; k++ {
					row[k] /= sum
					for i := 0; i < HS; i++ {
						out[(b*T+q)*C+h*HS+i] += row[k] * qkv[(b*T+k)*3*C+2*C+h*HS+i]
					}
				}
			}
		}
	}
	return
}

func refAttnBack(dqkv, dout, qkv, att []float64, B, T, NH, HS, W int) {
	C := NH * HS
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			for q := 0; q < T; q++ {
				k0 := firstKey(q, W)
				S := refSpan(T, W)
				row := att[((b*NH+h)*T+q)*S-k0:][:k0+S]
				da := make([]float64, T)
				dot := 0.0
				for k := k0; k <= q; k++ {
					for i := 0; i < HS; i++ {
						d := dout[(b*T+q)*C+h*HS+i]
						da[k] += d * qkv[(b*T+k)*3*C+2*C+h*HS+i]
						dqkv[(b*T+k)*3*C+2*C+h*HS+i] += row[k] * d
					}
					dot += row[k] * da[k]
				}
				for k := k0; k <= q; k++ {
					ds := row[k] * (da[k] - dot) / math.Sqrt(float64(HS))
					for i := 0; i < HS; i++ {
						dqkv[(b*T+q)*3*C+h*HS+i] += ds * qkv[(b*T+k)*3*C+C+h*HS+i]
						dqkv[(b*T+k)*3*C+C+h*HS+i] += ds * qkv[(b*T+q)*3*C+h*HS+i]
					}
				}
			}
		}
	}
}

// refXent returns the mean loss and dlogits of the mean loss.
func refXent(logits []float64, targets []int32, n, V int) (float64, []float64) {
	d := make([]float64, n*V)
	loss := 0.0
	for r := 0; r < n; r++ {
		x := logits[r*V:][:V]
		mx := math.Inf(-1)
		for _, v := range x {
			mx = math.Max(mx, v)
		}
		sum := 0.0
		for _, v := range x {
			sum += math.Exp(v - mx)
		}
		loss += math.Log(sum) - (x[targets[r]] - mx)
		for i, v := range x {
			p := math.Exp(v-mx) / sum
			if i == int(targets[r]) {
				p--
			}
			d[r*V+i] = p / float64(n)
		}
	}
	return loss / float64(n), d
}

func addv(a, b []float64) []float64 {
	y := make([]float64, len(a))
	for i := range a {
		y[i] = a[i] + b[i]
	}
	return y
}

// refGPT computes the mean loss and, when grads is non-nil, accumulates the
// gradient of every parameter (by name) into it.
func refGPT(cfg GPTConfig, p map[string][]float64, grads map[string][]float64, in, tg []int32, B, T int) float64 {
	C, V, N, NH := cfg.Width, cfg.Vocab, B*T, cfg.Heads
	HS := C / NH
	wte, wpe := p["transformer.wte.weight"], p["transformer.wpe.weight"]
	x := make([]float64, N*C)
	for r := 0; r < N; r++ {
		for i := 0; i < C; i++ {
			x[r*C+i] = wte[int(in[r])*C+i] + wpe[(r%T)*C+i]
		}
	}
	type acts struct{ x, ln1, m1, r1, qkv, att, atty, res2, ln2, m2, r2, fc, fca []float64 }
	saved := make([]acts, cfg.Layers)
	for l := 0; l < cfg.Layers; l++ {
		pre := "transformer.h." + itoa(l)
		a := acts{x: x}
		a.ln1, a.m1, a.r1 = refLN(x, p[pre+".ln_1.weight"], p[pre+".ln_1.bias"], N, C)
		a.qkv = refLinear(a.ln1, p[pre+".attn.c_attn.weight"], p[pre+".attn.c_attn.bias"], N, C, 3*C)
		a.atty, a.att = refAttn(a.qkv, B, T, NH, HS, cfg.AttentionWindow)
		a.res2 = addv(x, refLinear(a.atty, p[pre+".attn.c_proj.weight"], p[pre+".attn.c_proj.bias"], N, C, C))
		a.ln2, a.m2, a.r2 = refLN(a.res2, p[pre+".ln_2.weight"], p[pre+".ln_2.bias"], N, C)
		a.fc = refLinear(a.ln2, p[pre+".mlp.c_fc.weight"], p[pre+".mlp.c_fc.bias"], N, C, 4*C)
		a.fca = refGelu(a.fc)
		x = addv(a.res2, refLinear(a.fca, p[pre+".mlp.c_proj.weight"], p[pre+".mlp.c_proj.bias"], N, 4*C, C))
		saved[l] = a
	}
	lnf, mf, rf := refLN(x, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], N, C)
	// the head is wte unless p has an untied "lm_head.weight", which lets a
	// test see the head's share of the tied gradient apart
	head, headName := wte, "transformer.wte.weight"
	if h, ok := p["lm_head.weight"]; ok {
		head, headName = h, "lm_head.weight"
	}
	logits := refLinear(lnf, head, nil, N, C, V)
	loss, dlogits := refXent(logits, tg, N, V)
	if grads == nil {
		return loss
	}
	g := func(name string) []float64 { return grads[name] }
	dlnf := make([]float64, N*C)
	refLinearBack(dlnf, g(headName), nil, dlogits, lnf, head, N, C, V)
	dx := make([]float64, N*C)
	refLNBack(dx, g("transformer.ln_f.weight"), g("transformer.ln_f.bias"), dlnf, x, p["transformer.ln_f.weight"], mf, rf, N, C)
	for l := cfg.Layers - 1; l >= 0; l-- {
		pre := "transformer.h." + itoa(l)
		a := saved[l]
		dres2 := append([]float64(nil), dx...)
		dfca := make([]float64, N*4*C)
		refLinearBack(dfca, g(pre+".mlp.c_proj.weight"), g(pre+".mlp.c_proj.bias"), dx, a.fca, p[pre+".mlp.c_proj.weight"], N, 4*C, C)
		dfc := make([]float64, N*4*C)
		refGeluBack(dfc, a.fc, dfca)
		dln2 := make([]float64, N*C)
		refLinearBack(dln2, g(pre+".mlp.c_fc.weight"), g(pre+".mlp.c_fc.bias"), dfc, a.ln2, p[pre+".mlp.c_fc.weight"], N, C, 4*C)
		refLNBack(dres2, g(pre+".ln_2.weight"), g(pre+".ln_2.bias"), dln2, a.res2, p[pre+".ln_2.weight"], a.m2, a.r2, N, C)
		datty := make([]float64, N*C)
		refLinearBack(datty, g(pre+".attn.c_proj.weight"), g(pre+".attn.c_proj.bias"), dres2, a.atty, p[pre+".attn.c_proj.weight"], N, C, C)
		dqkv := make([]float64, N*3*C)
		refAttnBack(dqkv, datty, a.qkv, a.att, B, T, NH, HS, cfg.AttentionWindow)
		dln1 := make([]float64, N*C)
		refLinearBack(dln1, g(pre+".attn.c_attn.weight"), g(pre+".attn.c_attn.bias"), dqkv, a.ln1, p[pre+".attn.c_attn.weight"], N, C, 3*C)
		dx = dres2
		refLNBack(dx, g(pre+".ln_1.weight"), g(pre+".ln_1.bias"), dln1, a.x, p[pre+".ln_1.weight"], a.m1, a.r1, N, C)
	}
	for r := 0; r < N; r++ {
		for i := 0; i < C; i++ {
			g("transformer.wte.weight")[int(in[r])*C+i] += dx[r*C+i]
			g("transformer.wpe.weight")[(r%T)*C+i] += dx[r*C+i]
		}
	}
	return loss
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
