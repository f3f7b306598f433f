package modelir_test

// The Go runner of the service conformance suite (conformance/service): every case through the Client against
// `modelir serve` on a free port, compared by the rules of conformance/README.md.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"modelir.dev/go/modelir"
	v1 "modelir.dev/go/modelir/v1"
)

var suite = func() string { p, _ := filepath.Abs("../../../conformance/service"); return p }()

type serviceCase struct {
	Description string `json:"description"`
	Server      string `json:"server"`
	RPC         string `json:"rpc"`
	Token       string `json:"token"`
	// DeadlineMs is the call's deadline (default 30 s).
	DeadlineMs int `json:"deadlineMs"`
	// Repeat makes the call that many times and answers with the last (the first ones spend a budget).
	Repeat int `json:"repeat"`
	// CancelAfterEvents cancels a stream from this side after that many events.
	CancelAfterEvents int             `json:"cancelAfterEvents"`
	Request           json.RawMessage `json:"request"`
	Ignore            []string        `json:"ignore"`
	Expect            json.RawMessage `json:"expect"`
}

var listening = regexp.MustCompile(`modelir serving .* on [\d.]+:(\d+)`)

func startServer(t *testing.T, name string) string {
	t.Helper()
	var servers map[string]struct {
		Args []string          `json:"args"`
		Env  map[string]string `json:"env"`
	}
	raw, err := os.ReadFile(filepath.Join(suite, "servers.json"))
	if err == nil {
		err = json.Unmarshal(raw, &servers)
	}
	if err != nil {
		t.Fatal(err)
	}
	binary := os.Getenv("MODELIR_BIN")
	if binary == "" {
		binary = filepath.Join(suite, "../../.venv/bin/modelir")
	}
	spec := servers[name]
	cmd := exec.Command(binary, append([]string{"serve", "--host", "127.0.0.1", "--port", "0", "--grace", "0"}, spec.Args...)...)
	cmd.Dir = suite
	cmd.Env = os.Environ()
	for k, v := range spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	lines := bufio.NewScanner(stderr)
	var seen []string
	for lines.Scan() {
		seen = append(seen, lines.Text())
		if m := listening.FindStringSubmatch(lines.Text()); m != nil {
			go func() {
				for lines.Scan() { // keep draining the log so the server never blocks on a full pipe
				}
			}()
			return "127.0.0.1:" + m[1]
		}
	}
	t.Fatalf("modelir serve (%s) exited before listening:\n%s", name, strings.Join(seen, "\n"))
	return ""
}

// serverNames are the names of servers.json, sorted.
func serverNames(t *testing.T) []string {
	t.Helper()
	var servers map[string]json.RawMessage
	raw, err := os.ReadFile(filepath.Join(suite, "servers.json"))
	if err == nil {
		err = json.Unmarshal(raw, &servers)
	}
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(servers))
	for name := range servers {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// externalServers are the servers to test instead of starting `modelir serve`: MODELIR_CONFORMANCE_<NAME>=host:port
// for each name of servers.json the implementation under test serves; nil when no address is given.
func externalServers(t *testing.T, getenv func(string) string) map[string]string {
	t.Helper()
	given := map[string]string{}
	for _, name := range serverNames(t) {
		if address := getenv("MODELIR_CONFORMANCE_" + strings.ToUpper(name)); address != "" {
			given[name] = address
		}
	}
	if len(given) == 0 {
		return nil
	}
	return given
}

func toJSON(t *testing.T, m proto.Message) any {
	t.Helper()
	raw, err := protojson.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, raw)
}

func decode(t *testing.T, raw []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var out any
	if err := d.Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func parse(t *testing.T, raw []byte, m proto.Message) {
	t.Helper()
	if err := protojson.Unmarshal(raw, m); err != nil {
		t.Fatal(err)
	}
}

func errorJSON(t *testing.T, err error) map[string]any {
	var e *modelir.Error
	if !errors.As(err, &e) {
		t.Fatalf("not a modelir error: %v", err)
	}
	out := map[string]any{"code": e.CodeName()}
	if e.ErrorInfo != nil {
		out["errorInfo"], out["reason"] = toJSON(t, e.ErrorInfo), e.Reason
	}
	if e.BadRequest != nil {
		out["badRequest"] = toJSON(t, e.BadRequest)
	}
	if e.Unsupported != nil {
		out["unsupportedCapabilities"] = toJSON(t, e.Unsupported)
	}
	if e.RetryInfo != nil {
		out["retryInfo"] = toJSON(t, e.RetryInfo)
	}
	return out
}

// call makes the case's call Repeat times (default once) and returns the last answer.
func call(t *testing.T, client *modelir.Client, c serviceCase) map[string]any {
	var answer map[string]any
	for i := 0; i < max(c.Repeat, 1); i++ {
		answer = callOnce(t, client, c)
	}
	return answer
}

func callOnce(t *testing.T, client *modelir.Client, c serviceCase) map[string]any {
	deadline := 30 * time.Second
	if c.DeadlineMs > 0 {
		deadline = time.Duration(c.DeadlineMs) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var answer proto.Message
	var err error
	switch c.RPC {
	case "Generate":
		var req v1.GenerateRequest
		parse(t, c.Request, &req)
		var response *v1.Response
		response, err = client.Generate(ctx, req.GetRequest())
		answer = &v1.GenerateResponse{Response: response}
	case "StreamGenerate":
		var req v1.StreamGenerateRequest
		parse(t, c.Request, &req)
		var events []any
		var acc modelir.Accumulator
		for event, streamErr := range client.Stream(ctx, req.GetRequest()) {
			if streamErr != nil { // a stream that fails after some events answers with them too
				if len(events) > 0 {
					return map[string]any{"stream": events, "error": errorJSON(t, streamErr)}
				}
				return map[string]any{"error": errorJSON(t, streamErr)}
			}
			events = append(events, toJSON(t, &v1.StreamGenerateResponse{Event: event}))
			if err := acc.Add(event); err != nil {
				t.Fatal(err)
			}
			if len(events) == c.CancelAfterEvents {
				cancel() // the next read fails CANCELLED
			}
		}
		return map[string]any{"stream": events, "accumulated": toJSON(t, acc.Response())}
	case "Tokenize":
		var req v1.TokenizeRequest
		parse(t, c.Request, &req)
		answer, err = client.Tokenize(ctx, &req)
	case "Detokenize":
		var req v1.DetokenizeRequest
		parse(t, c.Request, &req)
		var text string
		text, err = client.Detokenize(ctx, req.GetModel(), req.GetTokenIds())
		answer = &v1.DetokenizeResponse{Text: text}
	case "ListModels":
		var models []*v1.ModelInfo
		models, err = client.ListModels(ctx)
		answer = &v1.ListModelsResponse{Models: models}
	case "Validate":
		var req v1.ValidateRequest
		parse(t, c.Request, &req)
		answer, err = client.Validate(ctx, req.GetRequest())
	case "GetServerInfo":
		answer, err = client.ServerInfo(ctx)
	case "Embed":
		var req v1.EmbedRequest
		parse(t, c.Request, &req)
		answer, err = client.Embed(ctx, &req)
	default:
		t.Fatalf("unknown rpc %s", c.RPC)
	}
	if err != nil {
		return map[string]any{"error": errorJSON(t, err)}
	}
	return map[string]any{"response": toJSON(t, answer)}
}

func TestServiceConformance(t *testing.T) {
	addresses := externalServers(t, os.Getenv)
	if addresses == nil {
		addresses = map[string]string{}
		for _, name := range serverNames(t) {
			addresses[name] = startServer(t, name)
		}
	}
	files, _ := filepath.Glob(filepath.Join(suite, "cases", "*.json"))
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatal("no service cases found")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".json"), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var c serviceCase
			if err := json.Unmarshal(raw, &c); err != nil {
				t.Fatal(err)
			}
			if addresses[c.Server] == "" {
				t.Skipf("no address given for the %q server (MODELIR_CONFORMANCE_%s)", c.Server, strings.ToUpper(c.Server))
			}
			var opts []modelir.Option
			if c.Token != "" {
				opts = append(opts, modelir.WithToken(c.Token))
			}
			client, err := modelir.Dial(addresses[c.Server], opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			ignore := map[string]bool{}
			for _, path := range c.Ignore {
				ignore[path] = true
			}
			actual := decode(t, mustJSON(t, call(t, client, c)))
			if problems := differences(decode(t, c.Expect), actual, "$", ignore); len(problems) > 0 {
				t.Error(strings.Join(problems, "\n"))
			}
			if c.CancelAfterEvents > 0 { // after a cancelled call the server must answer the next one as usual
				if _, err := client.ServerInfo(context.Background()); err != nil {
					t.Errorf("the server does not answer after the cancelled call: %v", err)
				}
			}
		})
	}
	t.Run("connect checks the IR version", func(t *testing.T) {
		if addresses["open"] == "" {
			t.Skip("no address given for the open server")
		}
		client, err := modelir.Connect(context.Background(), addresses["open"])
		if err != nil {
			t.Fatal(err)
		}
		client.Close()
	})
}

func TestIgnorePathsStartAtEachAnswer(t *testing.T) {
	ignore := map[string]bool{"serverVersion": true, "event.delta.text": true}
	expected := decode(t, []byte(`{"response": {"serverVersion": "1"}, "stream": [{"event": {"delta": {"text": "a"}}}]}`))
	actual := decode(t, []byte(`{"response": {"serverVersion": "2"}, "stream": [{"event": {"delta": {"text": "b"}}}]}`))
	if problems := differences(expected, actual, "$", ignore); len(problems) > 0 {
		t.Error(strings.Join(problems, "\n"))
	}
	if got := answerPath("$.accumulated.choices[1].message.parts[0].text"); got != "choices.message.parts.text" {
		t.Errorf("answerPath: %s", got)
	}
	if got := externalServers(t, func(name string) string {
		return map[string]string{"MODELIR_CONFORMANCE_OPEN": "127.0.0.1:50051"}[name]
	}); len(got) != 1 || got["open"] != "127.0.0.1:50051" {
		t.Errorf("externalServers: %v", got)
	}
}

// mustJSON round-trips the runner's answer through encoding/json so it compares like the decoded expectation.
func mustJSON(t *testing.T, v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(fmt.Errorf("encoding the answer: %w", err))
	}
	return raw
}
