package kvatlas

import (
	"errors"
	"strconv"
	"strings"
)

// Code is a status number of the protocol (docs/protocol.md §Status), the same table
// that gives REST errors their code. A Code is itself an error, so that the ErrX values
// below work with errors.Is:
//
//	if errors.Is(err, kvatlas.ErrNotFound) { ... }
//
// and errors.As(err, &e) with e *kvatlas.Error gives the message and the hints.
type Code uint16

// The status numbers. Never renumbered; a number this package does not know reads as
// CodeInternal.
const (
	CodeOK                   Code = 0
	CodeInvalidArgument      Code = 1
	CodeNotFound             Code = 2
	CodeAlreadyExists        Code = 3
	CodeFailedPrecondition   Code = 4
	CodeNotLeader            Code = 5
	CodeUnavailable          Code = 6
	CodeDeadlineExceeded     Code = 7
	CodeResourceExhausted    Code = 8
	CodeCorruption           Code = 9
	CodeIOError              Code = 10
	CodeInternal             Code = 11
	CodePayloadTooLarge      Code = 12
	CodeUnsupportedMediaType Code = 13
	CodeMethodNotAllowed     Code = 14
	CodeCompacted            Code = 15
	CodeWatchCut             Code = 16
	CodeCancelled            Code = 17
	CodeUnauthenticated      Code = 18
	CodePermissionDenied     Code = 19
	CodeWrongGroup           Code = 20
)

// codeNames is the one table of codes: index = number, value = the protocol's name.
var codeNames = [...]string{
	"ok", "invalid_argument", "not_found", "already_exists", "failed_precondition",
	"not_leader", "unavailable", "deadline_exceeded", "resource_exhausted", "corruption",
	"io_error", "internal", "payload_too_large", "unsupported_media_type",
	"method_not_allowed", "compacted", "watch_cut", "cancelled", "unauthenticated",
	"permission_denied", "wrong_group",
}

// Sentinels for errors.Is, one per code.
var (
	ErrInvalidArgument      error = CodeInvalidArgument
	ErrNotFound             error = CodeNotFound
	ErrAlreadyExists        error = CodeAlreadyExists
	ErrFailedPrecondition   error = CodeFailedPrecondition
	ErrNotLeader            error = CodeNotLeader
	ErrUnavailable          error = CodeUnavailable
	ErrDeadlineExceeded     error = CodeDeadlineExceeded
	ErrResourceExhausted    error = CodeResourceExhausted
	ErrCorruption           error = CodeCorruption
	ErrIOError              error = CodeIOError
	ErrInternal             error = CodeInternal
	ErrPayloadTooLarge      error = CodePayloadTooLarge
	ErrUnsupportedMediaType error = CodeUnsupportedMediaType
	ErrMethodNotAllowed     error = CodeMethodNotAllowed
	ErrCompacted            error = CodeCompacted
	ErrWatchCut             error = CodeWatchCut
	ErrCancelled            error = CodeCancelled
	ErrUnauthenticated      error = CodeUnauthenticated
	ErrPermissionDenied     error = CodePermissionDenied
	ErrWrongGroup           error = CodeWrongGroup
)

// String is the protocol's name of the code ("not_found"); "code(N)" for an unknown number.
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "code(" + strconv.Itoa(int(c)) + ")"
}

// Error makes a Code usable as a sentinel error.
func (c Code) Error() string { return "kvatlas: " + c.String() }

// CodeFromNumber maps a wire status number to its Code; unknown numbers are CodeInternal,
// as the protocol says.
func CodeFromNumber(n uint16) Code {
	if int(n) < len(codeNames) {
		return Code(n)
	}
	return CodeInternal
}

// Retryable reports whether the protocol says a call failing with c may be retried later
// (resource_exhausted, unavailable).
func (c Code) Retryable() bool { return c == CodeResourceExhausted || c == CodeUnavailable }

// Error is every error a call returns: a server's error answer, or one the client made
// (a lost connection, a deadline, an undecodable answer).
type Error struct {
	Code    Code
	Message string // the server's message without the machine-readable lines
	// On not_leader: the leader's raft id (0 = unknown) and binary-protocol address
	// ("" = not announced yet), from the error's hint lines.
	LeaderID      uint64
	LeaderAddress string
	// On the end of a watch (watch_cut, compacted, ...): resume_from, and on compacted the
	// oldest and current revisions; nil when the server gave none.
	ResumeFrom      *uint64
	OldestRevision  *uint64
	CurrentRevision *uint64
	cause           error
	leaderHint      bool // a not_leader answer carried leader_id=
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "kvatlas: " + e.Code.String()
	}
	return "kvatlas: " + e.Code.String() + ": " + e.Message
}

// Is matches the sentinel of e's code: errors.Is(err, kvatlas.ErrUnavailable).
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// Unwrap gives the underlying cause, when there is one (a net error, context.Canceled, a
// context.DeadlineExceeded), so that errors.Is(err, context.DeadlineExceeded) holds too.
func (e *Error) Unwrap() error { return e.cause }

func newError(code Code, message string) *Error { return &Error{Code: code, Message: message} }

func wrapError(code Code, message string, cause error) *Error {
	return &Error{Code: code, Message: message, cause: cause}
}

// decodeErrorPayload builds the Error of an error answer: the payload is the message,
// possibly followed by "\nkey=value" lines (not_leader's leader hint, a watch end's
// revisions). As the C++ client does, the last occurrence of each field wins; the message
// keeps only the text before the first recognised field.
func decodeErrorPayload(code Code, payload []byte) *Error {
	text := string(payload)
	e := &Error{Code: code, Message: text}
	cut := len(text)
	field := func(name string) (string, bool) {
		at := strings.LastIndex(text, "\n"+name+"=")
		if at < 0 {
			return "", false
		}
		if first := strings.Index(text, "\n"+name+"="); first < cut {
			cut = first
		}
		v := text[at+len(name)+2:]
		if nl := strings.IndexByte(v, '\n'); nl >= 0 {
			v = v[:nl]
		}
		return v, true
	}
	number := func(name string) *uint64 {
		v, ok := field(name)
		if !ok {
			return nil
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil
		}
		return &n
	}
	if code == CodeNotLeader {
		if id := number("leader_id"); id != nil {
			e.LeaderID = *id
			e.leaderHint = true
			e.LeaderAddress, _ = field("leader_rpc_address")
		}
	}
	e.ResumeFrom = number("resume_from")
	e.OldestRevision = number("oldest_revision")
	e.CurrentRevision = number("current_revision")
	e.Message = text[:cut]
	return e
}

// CodeOf is the Code of err: CodeOK for nil, the code of a *Error or Code in its chain,
// CodeInternal for any other error.
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var c Code
	if errors.As(err, &c) {
		return c
	}
	return CodeInternal
}

// asError is err as a *Error of code c (err itself when it is one).
func (c Code) asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return wrapError(c, err.Error(), err)
}
