package config

import (
	"reflect"
)

// auto resolves an "auto" value at path p for field f of section t.
// It returns the replacement, or false when the key is left unset.
//
// Rules (see doc.go): batch keys are left to Resolve's inference; fp16/bf16
// "enabled" becomes false; gradient_clipping becomes 1.0 (DeepSpeed's and HF's
// default); ZeRO bucket sizes come from the model hidden size h when known
// (h², 0.9·h², 10·h as HF does) and DeepSpeed's defaults otherwise; any other
// key of a section DeepSpeed schema-checks takes DeepSpeed's default (as
// DeepSpeed does); anything else is unresolved and reported.
func (l *loader) auto(p string, f *field, t reflect.Type, kind string) (any, bool) {
	h := int64(l.o.hidden)
	switch f.auto {
	case "batch":
		l.warn(p, `"auto": inferred by Resolve from the other batch keys and the data-parallel size`)
		return nil, false
	case "false":
		l.warn(p, `"auto" resolved to false (DeepSpeed's default; HF Trainer would take it from --fp16/--bf16); set it explicitly to train in reduced precision`)
		return false, true
	case "gradclip":
		l.warn(p, `"auto" resolved to 1.0 (DeepSpeed's default and HF's max_grad_norm default)`)
		return 1.0, true
	case "hidden2", "hidden09", "hidden10":
		if h > 0 {
			var v int64
			switch f.auto {
			case "hidden2":
				v = h * h
			case "hidden09":
				v = int64(0.9 * float64(h*h))
			default:
				v = 10 * h
			}
			l.warn(p, `"auto" resolved to %d from model hidden size %d (as HF Transformers does)`, v, h)
			return v, true
		}
	}
	if _, checked := checkedSections[t]; checked {
		d, ok := f.defaultValue(kind)
		if !ok {
			l.warn(p, `"auto" left unset (DeepSpeed drops "auto" in this section and uses its default)`)
			return nil, false
		}
		extra := ""
		if f.auto != "" && f.auto != "false" {
			extra = "; pass WithModelHidden (--hidden) to size it from the model as HF does"
		}
		l.warn(p, `"auto" resolved to DeepSpeed's default %s%s`, render(d), extra)
		return d, true
	}
	l.unresolvedAt(p, `"auto" cannot be resolved here (DeepSpeed would keep the string and fail; HF Trainer fills it from its arguments); set a value`)
	return nil, false
}

func (l *loader) unresolvedAt(p, msg string) {
	l.unresolved = append(l.unresolved, p)
	if l.o.strict {
		l.fail(p, "auto", "a concrete value", "unresolved \"auto\"; strict mode")
		return
	}
	l.warn(p, "%s", msg)
}
