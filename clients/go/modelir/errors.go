package modelir

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "modelir.dev/go/modelir/v1"
)

// ErrorDomain is the ErrorInfo domain of every error modelir raises.
const ErrorDomain = "modelir.dev"

// Sentinels for errors.Is: an *Error matches the one whose reason it carries.
var (
	ErrInvalidRequest        = errors.New("modelir: INVALID_REQUEST")
	ErrUnsupportedCapability = errors.New("modelir: UNSUPPORTED_CAPABILITY")
	ErrUnknownModel          = errors.New("modelir: UNKNOWN_MODEL")
	ErrUnauthenticated       = errors.New("modelir: UNAUTHENTICATED")
	ErrRateLimited           = errors.New("modelir: RATE_LIMITED")
	ErrDeadlineExceeded      = errors.New("modelir: DEADLINE_EXCEEDED")
)

var sentinels = map[string]error{
	"INVALID_REQUEST":        ErrInvalidRequest,
	"UNSUPPORTED_CAPABILITY": ErrUnsupportedCapability,
	"UNKNOWN_MODEL":          ErrUnknownModel,
	"UNAUTHENTICATED":        ErrUnauthenticated,
	"RATE_LIMITED":           ErrRateLimited,
	"DEADLINE_EXCEEDED":      ErrDeadlineExceeded,
}

// Error is a failed call: the gRPC code, modelir's reason and every structured detail the server sent.
type Error struct {
	// Code is the gRPC status code.
	Code codes.Code
	// Reason is ErrorInfo.reason when the server sent one (e.g. UNSUPPORTED_CAPABILITY), else the code's name.
	Reason string
	// Message is the status message.
	Message   string
	ErrorInfo *errdetails.ErrorInfo
	// BadRequest names the invalid fields, for INVALID_REQUEST.
	BadRequest *errdetails.BadRequest
	// Unsupported lists every missing capability and exceeded limit, for UNSUPPORTED_CAPABILITY.
	Unsupported *v1.UnsupportedCapabilities
	// RetryInfo says how long to wait before retrying, when the server said (RATE_LIMITED).
	RetryInfo *errdetails.RetryInfo
}

func (e *Error) Error() string { return "modelir: " + e.Reason + ": " + e.Message }

// Is makes errors.Is(err, ErrUnknownModel) and the other sentinels work.
func (e *Error) Is(target error) bool { return sentinels[e.Reason] == target }

// FromRPC turns a gRPC error into an *Error with its details decoded; nil and non-status errors pass unchanged.
func FromRPC(err error) error {
	st, ok := status.FromError(err)
	if err == nil || !ok {
		return err
	}
	out := &Error{Code: st.Code(), Reason: grpcCodeName(st.Code()), Message: st.Message()}
	for _, detail := range st.Details() {
		switch d := detail.(type) {
		case *errdetails.ErrorInfo:
			if d.GetDomain() == ErrorDomain {
				out.ErrorInfo, out.Reason = d, d.GetReason()
			}
		case *errdetails.BadRequest:
			out.BadRequest = d
		case *v1.UnsupportedCapabilities:
			out.Unsupported = d
		case *errdetails.RetryInfo:
			out.RetryInfo = d
		}
	}
	return out
}

var grpcCodeNames = []string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// grpcCodeName is the canonical name of a gRPC code, e.g. FAILED_PRECONDITION.
func grpcCodeName(code codes.Code) string {
	if int(code) < len(grpcCodeNames) {
		return grpcCodeNames[code]
	}
	return code.String()
}

// CodeName is the canonical name of the error's gRPC code, e.g. FAILED_PRECONDITION.
func (e *Error) CodeName() string { return grpcCodeName(e.Code) }
