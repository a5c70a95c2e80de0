// Command router is a small KV-aware OpenAI-compatible gateway built on the Go client (the
// Go twin of client/python/examples/router.py):
//
//	router --kvatlas 127.0.0.1:7071 --model llama --block-size 16 \
//	       --engine vllm-0=http://10.0.0.1:8000 --engine vllm-1=http://10.0.0.2:8000 \
//	       [--listen 127.0.0.1:8080] [--token T] [--addr-file F]
//
// POST /v1/completions and POST /v1/chat/completions: the router takes the prompt's token
// ids (prompt_token_ids, or prompt given as a list of ids; otherwise it tokenizes
// trivially: the UTF-8 bytes of the prompt, or of the chat messages' contents joined by
// newlines), routes with an in-process replica of the context (kvatlas.LocalIndex: no
// network hop) given each engine's load (the prompt tokens of the requests this router has
// in flight there, as queued prefill), and proxies the request to the pick unchanged.
// Streamed answers (server-sent events) are passed through as they arrive. The answer
// carries X-Kvatlas-Engine: <name>. GET /router/status reports the replica's revision and
// state and each engine's in-flight load.
//
// Engine names must be the instance ids the engines publish KV events under. A sketch,
// not a product: no retries, no health checks, no authentication of clients.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"kvatlas.dev/kvatlas"
)

const maxBodyBytes = 16 << 20 // larger requests get 413

// tokensOf is the request's token ids: given, or the prompt's UTF-8 bytes (a stand-in
// tokenizer, as router.py's).
func tokensOf(body map[string]json.RawMessage, path string) ([]uint32, error) {
	var ids []uint32
	if raw, ok := body["prompt_token_ids"]; ok {
		if err := json.Unmarshal(raw, &ids); err != nil {
			return nil, fmt.Errorf("prompt_token_ids: must be a list of token ids (%v)", err)
		}
		return ids, nil
	}
	if raw, ok := body["prompt"]; ok && len(raw) > 0 && raw[0] == '[' {
		if err := json.Unmarshal(raw, &ids); err == nil {
			return ids, nil
		}
	}
	var text string
	if strings.HasSuffix(path, "/chat/completions") {
		var messages []struct {
			Content interface{} `json:"content"`
		}
		if raw, ok := body["messages"]; ok {
			if err := json.Unmarshal(raw, &messages); err != nil {
				return nil, fmt.Errorf("messages: must be a list of objects (%v)", err)
			}
		}
		parts := make([]string, len(messages))
		for i, m := range messages {
			if s, ok := m.Content.(string); ok {
				parts[i] = s
			} else if m.Content != nil {
				parts[i] = fmt.Sprint(m.Content)
			}
		}
		text = strings.Join(parts, "\n")
	} else if raw, ok := body["prompt"]; ok {
		if err := json.Unmarshal(raw, &text); err != nil {
			text = string(raw)
		}
	}
	ids = make([]uint32, len(text))
	for i := 0; i < len(text); i++ {
		ids[i] = uint32(text[i])
	}
	return ids, nil
}

// router is the routing decision and the per-engine load it uses; safe for concurrent use.
type router struct {
	index   *kvatlas.LocalIndex
	context kvatlas.Context
	names   []string          // engine names, sorted
	engines map[string]string // name -> base URL
	client  *http.Client

	mu       sync.Mutex
	inFlight map[string]uint64 // prompt tokens of the requests in flight per engine
}

func newRouter(index *kvatlas.LocalIndex, ctx kvatlas.Context, engines map[string]string) *router {
	r := &router{index: index, context: ctx, engines: engines, inFlight: map[string]uint64{},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	for name := range engines {
		r.names = append(r.names, name)
	}
	sort.Strings(r.names)
	return r
}

// pick is the engine to send tokens to: the lowest route cost over the replica, or on load
// alone while the replica has no snapshot yet.
func (r *router) pick(tokens []uint32) string {
	r.mu.Lock()
	candidates := make([]kvatlas.Candidate, len(r.names))
	for i, name := range r.names {
		candidates[i] = kvatlas.Candidate{InstanceID: name, QueuedPrefillTokens: r.inFlight[name]}
	}
	r.mu.Unlock()
	request := kvatlas.RouteRequest{Lookup: kvatlas.LookupRequest{Context: r.context, Tokens: tokens},
		Candidates: candidates}
	answer, err := r.index.Route(request)
	if err != nil { // not synced yet: route on load alone
		answer, err = kvatlas.RouteFromLookup(&request, &kvatlas.LookupAnswer{})
		if err != nil {
			return r.names[0]
		}
	}
	return answer.Ranked[0].Candidate.InstanceID
}

func (r *router) begin(name string, tokens int) {
	r.mu.Lock()
	r.inFlight[name] += uint64(tokens)
	r.mu.Unlock()
}

func (r *router) end(name string, tokens int) {
	r.mu.Lock()
	r.inFlight[name] -= uint64(tokens)
	r.mu.Unlock()
}

func replyJSON(w http.ResponseWriter, status int, v interface{}) {
	data, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

func replyError(w http.ResponseWriter, status int, message string) {
	replyJSON(w, status, map[string]interface{}{"error": map[string]interface{}{"message": message, "code": status}})
}

func (r *router) status(w http.ResponseWriter) {
	st := r.index.Status()[0]
	r.mu.Lock()
	load := make(map[string]uint64, len(r.inFlight))
	for name := range r.engines {
		load[name] = r.inFlight[name]
	}
	r.mu.Unlock()
	lastError := ""
	if st.LastError != nil {
		lastError = st.LastError.Error()
	}
	replyJSON(w, http.StatusOK, map[string]interface{}{"revision": st.Revision,
		"synced": st.State == kvatlas.LocalLive, "state": st.State.String(), "last_error": lastError,
		"in_flight_tokens": load})
}

func (r *router) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodGet && req.URL.Path == "/router/status" {
		r.status(w)
		return
	}
	if req.Method != http.MethodPost || (req.URL.Path != "/v1/completions" && req.URL.Path != "/v1/chat/completions") {
		replyError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s", req.Method, req.URL.Path))
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			replyError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", maxBodyBytes))
		} else {
			replyError(w, http.StatusBadRequest, fmt.Sprintf("reading the body: %v", err))
		}
		return
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(raw, &body); err != nil || body == nil {
		replyError(w, http.StatusBadRequest, "bad request body: the body must be a JSON object")
		return
	}
	tokens, err := tokensOf(body, req.URL.Path)
	if err != nil {
		replyError(w, http.StatusBadRequest, "bad request body: "+err.Error())
		return
	}
	name := r.pick(tokens)
	r.begin(name, len(tokens))
	defer r.end(name, len(tokens))
	r.proxy(w, req, name, raw)
}

// proxy sends the request to engine name and relays its answer, flushing each piece as it
// arrives (server-sent events pass through unbuffered).
func (r *router) proxy(w http.ResponseWriter, req *http.Request, name string, raw []byte) {
	url := strings.TrimSuffix(r.engines[name], "/") + req.URL.Path
	up, err := http.NewRequestWithContext(req.Context(), http.MethodPost, url, strings.NewReader(string(raw)))
	if err != nil {
		replyError(w, http.StatusBadGateway, fmt.Sprintf("engine %s: %v", name, err))
		return
	}
	up.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(up)
	if err != nil {
		replyError(w, http.StatusBadGateway, fmt.Sprintf("engine %s unreachable: %v", name, err))
		return
	}
	defer resp.Body.Close()
	contentType := resp.Header.Get("Content-Type")
	if contentType == "" {
		contentType = "application/json"
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Kvatlas-Engine", name)
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // the client went away
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "router: %v\n", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("router", flag.ContinueOnError)
	var servers, engineFlags listFlag
	fs.Var(&servers, "kvatlas", "a kvatlas server's rpc address HOST:PORT (repeatable)")
	fs.Var(&engineFlags, "engine", "NAME=URL of an engine (repeatable)")
	model := fs.String("model", "", "the model (context) to route")
	blockSize := fs.Uint("block-size", 0, "the engines' block size in tokens")
	listen := fs.String("listen", "127.0.0.1:8080", "HOST:PORT; port 0 = any")
	token := fs.String("token", "", "kvatlas access token (read role)")
	addrFile := fs.String("addr-file", "", "write the bound HOST:PORT here once listening")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(servers) == 0 || len(engineFlags) == 0 || *model == "" || *blockSize == 0 {
		return errors.New("--kvatlas, --engine, --model and --block-size are required")
	}
	engines := map[string]string{}
	for _, e := range engineFlags {
		name, url, ok := strings.Cut(e, "=")
		if !ok || name == "" || url == "" {
			return fmt.Errorf("--engine %q: must be NAME=URL", e)
		}
		engines[name] = url
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client, err := kvatlas.Dial(ctx, kvatlas.Options{Endpoints: servers, Token: *token})
	if err != nil {
		return err
	}
	defer client.Close()
	kvctx := kvatlas.Context{Model: *model, BlockSize: uint32(*blockSize)}
	index, err := kvatlas.NewLocalIndex(ctx, client, kvatlas.LocalIndexOptions{Contexts: []kvatlas.Context{kvctx},
		OnError: func(c kvatlas.Context, err error) { log.Printf("replica of %s: %v", c.Model, err) }})
	if err != nil {
		return err
	}
	defer index.Close()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	bound := l.Addr().String()
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile+".tmp", []byte(bound+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(*addrFile+".tmp", *addrFile); err != nil {
			return err
		}
	}
	log.Printf("router listening on %s", bound)
	return http.Serve(l, newRouter(index, kvctx, engines))
}
