package config

import (
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// field describes one key of a section, read from the struct's json and ds tags.
//
// ds tag options (separated by ';'): def=V default; min=, max=, gt= bounds;
// enum=a|b list; fold (case-insensitive enum); auto=RULE how "auto" resolves;
// deepgo (deepgo extension key); required; keepauto ("auto" is a real value);
// kind=K (a sub-section of kind K); only=K (key valid only in kind K);
// optdef=V (default in kind "optimizer").
type field struct {
	name     string
	index    int
	typ      reflect.Type
	def      string
	hasDef   bool
	optdef   string
	min, max *float64
	gt       bool
	enum     []string
	fold     bool
	auto     string
	deepgo   bool
	required bool
	keepauto bool
	kind     string
	only     string
}

type section struct {
	typ    reflect.Type
	fields []*field
	byName map[string]*field
}

var sections sync.Map // reflect.Type -> *section

func sectionOf(t reflect.Type) *section {
	if s, ok := sections.Load(t); ok {
		return s.(*section)
	}
	s := &section{typ: t, byName: map[string]*field{}}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "" || name == "-" || !sf.IsExported() {
			continue
		}
		f := &field{name: name, index: i, typ: sf.Type}
		for _, opt := range strings.Split(sf.Tag.Get("ds"), ";") {
			k, v, _ := strings.Cut(opt, "=")
			switch k {
			case "def":
				f.def, f.hasDef = v, true
			case "optdef":
				f.optdef = v
			case "min", "gt":
				x, _ := strconv.ParseFloat(v, 64)
				f.min, f.gt = &x, k == "gt"
			case "max":
				x, _ := strconv.ParseFloat(v, 64)
				f.max = &x
			case "enum":
				f.enum = strings.Split(v, "|")
			case "fold":
				f.fold = true
			case "auto":
				f.auto = v
			case "deepgo":
				f.deepgo = true
			case "required":
				f.required = true
			case "keepauto":
				f.keepauto = true
			case "kind":
				f.kind = v
			case "only":
				f.only = v
			}
		}
		s.fields = append(s.fields, f)
		s.byName[name] = f
	}
	sections.Store(t, s)
	return s
}

// names returns the keys valid in kind (for suggestions).
func (s *section) names(kind string) []string {
	var out []string
	for _, f := range s.fields {
		if f.only == "" || f.only == kind {
			out = append(out, f.name)
		}
	}
	sort.Strings(out)
	return out
}

// base returns the type with pointers removed.
func base(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// isSection reports whether t (pointers removed) is a struct section.
func isSection(t reflect.Type) bool { return base(t).Kind() == reflect.Struct }

// defaultValue returns the raw default of f in kind, or false if it has none.
func (f *field) defaultValue(kind string) (any, bool) {
	d := f.def
	if kind == "optimizer" && f.optdef != "" {
		d = f.optdef
	}
	if !f.hasDef {
		return nil, false
	}
	switch base(f.typ).Kind() {
	case reflect.String, reflect.Interface:
		return d, true
	case reflect.Bool:
		return d == "true", true
	case reflect.Int, reflect.Int64:
		i, _ := strconv.ParseInt(d, 10, 64)
		return i, true
	case reflect.Float64:
		x, _ := strconv.ParseFloat(d, 64)
		return x, true
	case reflect.Slice:
		var v []any
		if err := json.Unmarshal([]byte(d), &v); err != nil {
			return nil, false
		}
		return normalize(v), true
	}
	return nil, false
}

// allowed describes what f accepts, for error messages.
func (f *field) allowed() string {
	t := base(f.typ)
	var s string
	switch t.Kind() {
	case reflect.Bool:
		s = "true or false"
	case reflect.Int, reflect.Int64:
		s = "an integer"
	case reflect.Float64:
		s = "a number"
	case reflect.String:
		if len(f.enum) > 0 {
			q := make([]string, len(f.enum))
			for i, e := range f.enum {
				q[i] = strconv.Quote(e)
			}
			s = "one of " + strings.Join(q, ", ")
			if f.fold {
				s += " (any case)"
			}
		} else {
			s = "a string"
		}
	case reflect.Struct, reflect.Map:
		s = "an object"
	case reflect.Slice:
		s = "an array of " + map[reflect.Kind]string{reflect.String: "strings", reflect.Int: "integers"}[t.Elem().Kind()]
	default:
		s = "any value"
	}
	if f.min != nil {
		if f.gt {
			s += " > " + fmtNum(*f.min)
		} else {
			s += " >= " + fmtNum(*f.min)
		}
	}
	if f.max != nil {
		s += " and <= " + fmtNum(*f.max)
	}
	if f.auto != "" {
		s += `, or "auto"`
	}
	return s
}

func fmtNum(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
