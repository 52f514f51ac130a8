package main

import (
	"bufio"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
)

// sqsFake is a stand-in SQS queue speaking the JSON protocol the SDK uses: SendMessage appends
// the message to a file (one JSON object a line), so a later run can feed it to the runner;
// ChangeMessageVisibility is accepted.
type sqsFake struct {
	mu   sync.Mutex
	file string
}

// queued is one message the stand-in queue received.
type queued struct {
	MessageID string `json:"message_id"`
	Body      string `json:"body"`
	Delay     int    `json:"delay_seconds,omitempty"`
}

func (f *sqsFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct {
		MessageBody  string
		DelaySeconds int
	}
	json.NewDecoder(r.Body).Decode(&in)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	switch r.Header.Get("X-Amz-Target") {
	case "AmazonSQS.SendMessage":
		f.mu.Lock()
		defer f.mu.Unlock()
		n := len(readQueue(f.file))
		m := queued{MessageID: fmt.Sprintf("local-%d", n+1), Body: in.MessageBody, Delay: in.DelaySeconds}
		line, _ := json.Marshal(m)
		fh, err := os.OpenFile(f.file, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err == nil {
			_, err = fh.Write(append(line, '\n'))
			fh.Close()
		}
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, `{"__type":"InternalError","message":%q}`, err.Error())
			return
		}
		sum := md5.Sum([]byte(in.MessageBody))
		json.NewEncoder(w).Encode(map[string]string{"MessageId": m.MessageID, "MD5OfMessageBody": hex.EncodeToString(sum[:])})
	case "AmazonSQS.ChangeMessageVisibility":
		w.Write([]byte(`{}`))
	default:
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"__type":"InvalidAction","message":"the local stand-in queue answers SendMessage and ChangeMessageVisibility only, not %s"}`, r.Header.Get("X-Amz-Target"))
	}
}

// readQueue returns every message the stand-in queue recorded, oldest first.
func readQueue(file string) []queued {
	fh, err := os.Open(file)
	if err != nil {
		return nil
	}
	defer fh.Close()
	var out []queued
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var m queued
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// secretsFake is a stand-in Secrets Manager: GetSecretValue answers from a file mapping ARNs
// to values. It never logs a value.
type secretsFake struct{ values map[string]string }

func (f *secretsFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct{ SecretId string }
	json.NewDecoder(r.Body).Decode(&in)
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	if r.Header.Get("X-Amz-Target") != "secretsmanager.GetSecretValue" {
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"__type":"InvalidRequestException","message":"the local stand-in answers GetSecretValue only"}`))
		return
	}
	v, ok := f.values[in.SecretId]
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"__type":"ResourceNotFoundException","message":"the local stand-in holds no secret %s (see the -secrets file)"}`, in.SecretId)
		return
	}
	json.NewEncoder(w).Encode(map[string]string{"ARN": in.SecretId, "Name": in.SecretId, "SecretString": v})
}

// serveAt serves h at the host:port of endpoint (an http://127.0.0.1:PORT URL).
func serveAt(endpoint string, h http.Handler) (*http.Server, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || u.Scheme != "http" {
		return nil, fmt.Errorf("endpoint %q is not http://HOST:PORT", endpoint)
	}
	ln, err := net.Listen("tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("cannot serve the stand-in at %s: %w (another make invoke-fakes running? set another port in events/env.json, or with -set)", u.Host, err)
	}
	srv := &http.Server{Handler: h}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "stand-in:", err)
		}
	}()
	return srv, nil
}
