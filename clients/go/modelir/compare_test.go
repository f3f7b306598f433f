package modelir_test

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"sort"
)

// The comparison rules of the service conformance suite (conformance/README.md), for the Go runner. Values are
// decoded with json.Decoder.UseNumber, so an int64 beyond 2^53 never passes through a float64.

var integer = regexp.MustCompile(`^-?\d+$`)

// An ignore path is dotted from the root of one answer (the response, each stream event, the accumulated response,
// the error), with no list indexes: answerPath strips the `expect` key (and a stream event's index), then every index.
var (
	answerRoot = regexp.MustCompile(`^\$\.[^.\[]+(\[\d+\])?\.?`)
	listIndex  = regexp.MustCompile(`\[\d+\]`)
)

// answerPath turns `$.stream[2].event.delta` into `event.delta`, the form of a case's ignore paths.
func answerPath(where string) string {
	return listIndex.ReplaceAllString(answerRoot.ReplaceAllString(where, ""), "")
}

// number is a JSON number, or a string proto-JSON uses for one (int64, NaN, infinities): an exact integer or a float.
func number(v any) (*big.Int, float64, bool) {
	var text string
	switch x := v.(type) {
	case json.Number:
		text = string(x)
	case string:
		switch x {
		case "NaN":
			return nil, math.NaN(), true
		case "Infinity":
			return nil, math.Inf(1), true
		case "-Infinity":
			return nil, math.Inf(-1), true
		}
		if !integer.MatchString(x) {
			return nil, 0, false
		}
		text = x
	default:
		return nil, 0, false
	}
	if integer.MatchString(text) {
		n, _ := new(big.Int).SetString(text, 10)
		return n, 0, true
	}
	f, err := json.Number(text).Float64()
	return nil, f, err == nil
}

func asFloat(n *big.Int, f float64) float64 {
	if n != nil {
		out, _ := new(big.Float).SetInt(n).Float64()
		return out
	}
	return f
}

func sameNumber(e, a any) bool {
	en, ef, ok1 := number(e)
	an, af, ok2 := number(a)
	if !ok1 || !ok2 {
		return false
	}
	if en != nil && an != nil {
		return en.Cmp(an) == 0
	}
	x, y := asFloat(en, ef), asFloat(an, af)
	return (math.IsNaN(x) && math.IsNaN(y)) || float32(x) == float32(y)
}

// differences lists where actual differs from expected, as JSON paths; `timing` and the ignored paths are skipped.
func differences(expected, actual any, path string, ignore map[string]bool) []string {
	var out []string
	switch e := expected.(type) {
	case map[string]any:
		a, ok := actual.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range e {
			keys[k] = true
		}
		for k := range a {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			where := path + "." + k
			if k == "timing" || ignore[answerPath(where)] {
				continue
			}
			ev, inE := e[k]
			av, inA := a[k]
			switch {
			case !inA:
				out = append(out, fmt.Sprintf("%s: missing (expected %v)", where, ev))
			case !inE:
				out = append(out, fmt.Sprintf("%s: unexpected %v", where, av))
			default:
				out = append(out, differences(ev, av, where, ignore)...)
			}
		}
		return out
	case []any:
		a, ok := actual.([]any)
		if !ok {
			break
		}
		if len(e) != len(a) {
			out = append(out, fmt.Sprintf("%s: %d items, expected %d", path, len(a), len(e)))
		}
		for i := 0; i < len(e) && i < len(a); i++ {
			out = append(out, differences(e[i], a[i], fmt.Sprintf("%s[%d]", path, i), ignore)...)
		}
		return out
	}
	if fmt.Sprint(expected) == fmt.Sprint(actual) && fmt.Sprintf("%T", expected) == fmt.Sprintf("%T", actual) {
		return nil
	}
	if sameNumber(expected, actual) {
		return nil
	}
	return []string{fmt.Sprintf("%s: %v, expected %v", path, actual, expected)}
}
