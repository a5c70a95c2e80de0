package main

// The router against three fake engines (the Go twin of tests/python/test_router.py). Each
// fake engine is an OpenAI-compatible HTTP server in this process whose KV cache is a fake
// vLLM publisher (tests/integration/fake_engine_publisher.py under /usr/bin/python3: ZMQ
// PUB + replay): serving a prompt publishes BlockStored for its blocks, as vLLM does. The
// engines are registered with a real kvatlas-server (POST /register), and a repeated
// prefix must go to the engine that cached it.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"kvatlas.dev/kvatlas"
)

const bs = 16

// Bound on every wait (never a timed assertion: a wait that runs out fails the test).
const bound = 30 * time.Second

var ctxM = kvatlas.Context{Model: "m", BlockSize: bs}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// startServer starts kvatlas-server on free loopback ports; its rpc and http addresses.
func startServer(t *testing.T) (rpc, httpAddr string) {
	bin := os.Getenv("KVATLAS_SERVER_BIN")
	if bin == "" {
		t.Skip("KVATLAS_SERVER_BIN is not set (the kvatlas-server binary; ctest sets it)")
	}
	dir := t.TempDir()
	var log bytes.Buffer
	cmd := exec.Command(bin, "--data-dir", dir, "--http-listen", "127.0.0.1:0", "--rpc-listen",
		"127.0.0.1:0", "--storage-sync", "false", "--log-level", "warning")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(bound)
	for {
		r, err1 := os.ReadFile(filepath.Join(dir, "rpc.addr"))
		h, err2 := os.ReadFile(filepath.Join(dir, "http.addr"))
		if err1 == nil && err2 == nil && len(r) > 0 && len(h) > 0 {
			return strings.TrimSpace(string(r)), strings.TrimSpace(string(h))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// publisher drives tests/integration/fake_engine_publisher.py through its JSON lines.
type publisher struct {
	cmd      *exec.Cmd
	in       io.WriteCloser
	out      *bufio.Reader
	mu       sync.Mutex
	endpoint string
	replay   string
}

func startPublisher(t *testing.T) *publisher {
	script, _ := filepath.Abs("../../../../tests/integration/fake_engine_publisher.py")
	if err := exec.Command("/usr/bin/python3", "-c", "import zmq, msgpack").Run(); err != nil {
		t.Skip("/usr/bin/python3 with zmq and msgpack is needed for the fake engines")
	}
	p := &publisher{cmd: exec.Command("/usr/bin/python3", script, "--replay-endpoint", "tcp://127.0.0.1:0")}
	p.cmd.Stderr = os.Stderr
	var err error
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.out = bufio.NewReader(stdout)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.in.Close(); _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	var ready struct {
		Ready          bool
		Endpoint       string
		ReplayEndpoint string `json:"replay_endpoint"`
	}
	line, err := p.out.ReadBytes('\n')
	if err != nil || json.Unmarshal(line, &ready) != nil || !ready.Ready {
		t.Fatalf("the fake publisher did not start: %q %v", line, err)
	}
	p.endpoint, p.replay = ready.Endpoint, ready.ReplayEndpoint
	return p
}

func (p *publisher) command(cmd map[string]interface{}) (map[string]interface{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	line, _ := json.Marshal(cmd)
	if _, err := p.in.Write(append(line, '\n')); err != nil {
		return nil, err
	}
	reply, err := p.out.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	var out map[string]interface{}
	if err := json.Unmarshal(reply, &out); err != nil {
		return nil, err
	}
	if e, ok := out["error"]; ok {
		return nil, fmt.Errorf("publisher: %v", e)
	}
	return out, nil
}

// fakeEngine answers with its name and caches (publishes) what it served. A streamed
// answer sends its first event, then waits for release before the rest: the test reads
// the first event through the router before releasing it, so a router that buffered the
// answer would never show it (and the engine's bounded wait would run out).
type fakeEngine struct {
	name    string
	pub     *publisher
	srv     *httptest.Server
	release chan struct{}

	mu       sync.Mutex
	served   [][]uint32
	timedOut bool
}

func startEngine(t *testing.T, name string) *fakeEngine {
	e := &fakeEngine{name: name, pub: startPublisher(t), release: make(chan struct{}, 16)}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]json.RawMessage
		_ = json.Unmarshal(raw, &body)
		tokens, _ := tokensOf(body, r.URL.Path)
		e.mu.Lock()
		e.served = append(e.served, tokens)
		e.mu.Unlock()
		if _, err := e.pub.command(map[string]interface{}{"op": "store", "tokens": tokens, "block_size": bs}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if string(body["stream"]) == "true" {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			fmt.Fprintf(w, "data: {\"choices\": [{\"text\": %q}]}\n\n", e.name)
			w.(http.Flusher).Flush()
			select {
			case <-e.release:
			case <-time.After(bound):
				e.mu.Lock()
				e.timedOut = true
				e.mu.Unlock()
			}
			fmt.Fprintf(w, "data: {\"choices\": [{\"text\": \" done\"}]}\n\ndata: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object": "text_completion", "choices": [{"text": %q}]}`, e.name)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *fakeEngine) lastServed() []uint32 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.served[len(e.served)-1]
}

func register(t *testing.T, httpAddr string, e *fakeEngine) {
	body, _ := json.Marshal(map[string]interface{}{"endpoint": e.pub.endpoint, "replay_endpoint": e.pub.replay,
		"type": "vLLM", "modelname": "m", "instance_id": e.name, "block_size": bs, "dp_rank": 0})
	resp, err := http.Post("http://"+httpAddr+"/register", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("register %s: %d %s", e.name, resp.StatusCode, answer)
	}
	if _, err := e.pub.command(map[string]interface{}{"op": "wait_peer", "count": 1, "timeout_ms": 10000}); err != nil {
		t.Fatal(err)
	}
}

func post(t *testing.T, url string, body interface{}) (status int, engine string, data []byte) {
	raw, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ = io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Kvatlas-Engine"), data
}

// waitCached waits until the server has engine holding tokens, then until the router's
// replica reaches the revision of that lookup: it must then hold what the lookup showed
// (docs/api.md §Conventions: a read's revision is exactly what it reflects, and the change
// feed up to it holds the same).
func waitCached(t *testing.T, c *kvatlas.Client, index *kvatlas.LocalIndex, tokens []uint32, engine string) {
	t.Helper()
	ctx := testCtx(t)
	want := uint32(len(tokens) / bs)
	for {
		a, err := c.Lookup(ctx, kvatlas.LookupRequest{Context: ctxM, Tokens: tokens, Instance: engine})
		if err != nil {
			t.Fatal(err)
		}
		if a.Instances[0].Blocks.GPU == want {
			if err := index.WaitForRevision(ctx, a.Revision); err != nil {
				t.Fatal(err)
			}
			local, err := index.Lookup(kvatlas.LookupRequest{Context: ctxM, Tokens: tokens, Instance: engine})
			if err != nil || local.Instances[0].Blocks.GPU != want {
				t.Fatalf("the router's replica at the server lookup's revision %d does not show %s holding the prefix: %+v %v",
					a.Revision, engine, local, err)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never held the prefix: %+v", engine, a.Instances)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func seq(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func TestRepeatedPrefixGoesToTheEngineThatCachedIt(t *testing.T) {
	rpc, httpAddr := startServer(t)
	engines := []*fakeEngine{startEngine(t, "engine-0"), startEngine(t, "engine-1"), startEngine(t, "engine-2")}
	byName := map[string]*fakeEngine{}
	urls := map[string]string{}
	for _, e := range engines {
		register(t, httpAddr, e)
		byName[e.name], urls[e.name] = e, e.srv.URL
	}
	ctx := testCtx(t)
	c, err := kvatlas.Dial(ctx, kvatlas.Options{Endpoints: []string{rpc}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	index, err := kvatlas.NewLocalIndex(ctx, c, kvatlas.LocalIndexOptions{Contexts: []kvatlas.Context{ctxM}})
	if err != nil {
		t.Fatal(err)
	}
	defer index.Close()
	rt := httptest.NewServer(newRouter(index, ctxM, urls))
	defer rt.Close()

	// engine-2 serves (and caches) the prefix directly, not through the router.
	prefix := seq(1000, 8*bs)
	if status, _, _ := post(t, engines[2].srv.URL+"/v1/completions", map[string]interface{}{"model": "m",
		"prompt_token_ids": append(append([]uint32{}, prefix...), 1, 2, 3)}); status != 200 {
		t.Fatal(status)
	}
	waitCached(t, c, index, prefix, "engine-2")
	asked := append(append([]uint32{}, prefix...), 7, 8, 9)
	status, picked, data := post(t, rt.URL+"/v1/completions", map[string]interface{}{"model": "m", "prompt_token_ids": asked})
	if status != 200 || picked != "engine-2" || !bytes.Contains(data, []byte(`"engine-2"`)) {
		t.Fatalf("the cached prefix: %d %q %s", status, picked, data)
	}
	if got := engines[2].lastServed(); fmt.Sprint(got) != fmt.Sprint(asked) {
		t.Errorf("engine-2 was sent %v", got)
	}

	// A new prefix goes somewhere; repeated, it follows its cache there, streaming.
	other := seq(5000, 6*bs)
	status, first, _ := post(t, rt.URL+"/v1/completions", map[string]interface{}{"model": "m", "prompt": other})
	if status != 200 || byName[first] == nil {
		t.Fatalf("a new prefix: %d %q", status, first)
	}
	waitCached(t, c, index, other, first)
	raw, _ := json.Marshal(map[string]interface{}{"model": "m", "prompt": append(append([]uint32{}, other...), 4), "stream": true})
	resp, err := http.Post(rt.URL+"/v1/completions", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if again := resp.Header.Get("X-Kvatlas-Engine"); resp.StatusCode != 200 || again != first {
		t.Fatalf("the repeated prefix, streamed: %d to %q, not %q", resp.StatusCode, again, first)
	}
	body := bufio.NewReader(resp.Body)
	var event []byte
	for !bytes.HasSuffix(event, []byte("\n\n")) { // the first event, before the engine sends more
		b, err := body.ReadByte()
		if err != nil {
			t.Fatalf("the first event: %q %v", event, err)
		}
		event = append(event, b)
	}
	if !bytes.HasPrefix(event, []byte("data: ")) || !bytes.Contains(event, []byte(first)) {
		t.Errorf("first event %q", event)
	}
	byName[first].release <- struct{}{}
	rest, _ := io.ReadAll(body)
	if !bytes.HasSuffix(rest, []byte("data: [DONE]\n\n")) {
		t.Errorf("the rest of the stream: %q", rest)
	}
	byName[first].mu.Lock()
	if byName[first].timedOut {
		t.Errorf("the first event did not come through before the engine sent the rest")
	}
	byName[first].mu.Unlock()

	// Chat: the router and the engine tokenize the messages the same trivial way.
	content := strings.Repeat("x", 4*bs)
	chat := map[string]interface{}{"model": "m", "messages": []map[string]string{{"role": "user", "content": content}}}
	status, chatEngine, _ := post(t, rt.URL+"/v1/chat/completions", chat)
	if status != 200 || byName[chatEngine] == nil {
		t.Fatalf("chat: %d %q", status, chatEngine)
	}
	xs := make([]uint32, len(content))
	for i := range xs {
		xs[i] = 'x'
	}
	waitCached(t, c, index, xs, chatEngine)
	chat["messages"] = []map[string]string{{"role": "user", "content": content}, {"role": "user", "content": "more"}}
	if status, again, _ := post(t, rt.URL+"/v1/chat/completions", chat); status != 200 || again != chatEngine {
		t.Errorf("chat again: %d %q, not %q", status, again, chatEngine)
	}

	if status, _, data := post(t, rt.URL+"/v1/completions", []string{"not", "an", "object"}); status != 400 || !bytes.Contains(data, []byte("JSON object")) {
		t.Errorf("a body that is not an object: %d %s", status, data)
	}
	resp2, err := http.Get(rt.URL + "/router/status")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Synced bool
		State  string
	}
	_ = json.NewDecoder(resp2.Body).Decode(&st)
	resp2.Body.Close()
	if !st.Synced || st.State != "live" {
		t.Errorf("status: %+v", st)
	}
}
