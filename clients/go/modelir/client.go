package modelir

import (
	"context"
	"errors"
	"io"
	"iter"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	v1 "modelir.dev/go/modelir/v1"
)

// Client calls one modelir server. It is safe for concurrent use.
type Client struct {
	conn *grpc.ClientConn
	rpc  v1.ModelServiceClient
}

// Option configures a Client.
type Option func(*options)

type options struct{ token string }

// WithToken sends `authorization: Bearer <token>` on every call.
func WithToken(token string) Option { return func(o *options) { o.token = token } }

// Dial makes a client for the server at target (host:port) without the version handshake; see Connect.
func Dial(target string, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	withToken := func(ctx context.Context) context.Context {
		if o.token == "" {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+o.token)
	}
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
			invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
			return invoker(withToken(ctx), method, req, reply, cc, callOpts...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
			method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(withToken(ctx), desc, cc, method, callOpts...)
		}),
	)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn, rpc: v1.NewModelServiceClient(conn)}, nil
}

// Connect is Dial plus the handshake: it refuses (with *IncompatibleServerError) a server whose IR major version
// differs from IRVersion.
func Connect(ctx context.Context, target string, opts ...Option) (*Client, error) {
	c, err := Dial(target, opts...)
	if err != nil {
		return nil, err
	}
	info, err := c.ServerInfo(ctx)
	if err == nil {
		err = CheckCompatible(info.GetIrVersion(), IRVersion)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Generate runs one request and returns the complete response.
func (c *Client) Generate(ctx context.Context, request *v1.Request) (*v1.Response, error) {
	answer, err := c.rpc.Generate(ctx, &v1.GenerateRequest{Request: request})
	return answer.GetResponse(), FromRPC(err)
}

// Stream runs one request and yields its events; stopping early (or cancelling ctx) cancels the call, and the
// server stops generating. Accumulate folds the events.
func (c *Client) Stream(ctx context.Context, request *v1.Request) iter.Seq2[*v1.StreamEvent, error] {
	return func(yield func(*v1.StreamEvent, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := c.rpc.StreamGenerate(ctx, &v1.StreamGenerateRequest{Request: request})
		if err != nil {
			yield(nil, FromRPC(err))
			return
		}
		for {
			message, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, FromRPC(err))
				return
			}
			if !yield(message.GetEvent(), nil) {
				return
			}
		}
	}
}

// Tokenize tokenizes text as the model does, optionally after a context.
func (c *Client) Tokenize(ctx context.Context, request *v1.TokenizeRequest) (*v1.TokenizeResponse, error) {
	answer, err := c.rpc.Tokenize(ctx, request)
	return answer, FromRPC(err)
}

// Detokenize turns token ids back into text with the model's own tokenizer.
func (c *Client) Detokenize(ctx context.Context, model string, tokenIDs []int32) (string, error) {
	answer, err := c.rpc.Detokenize(ctx, &v1.DetokenizeRequest{Model: model, TokenIds: tokenIDs})
	return answer.GetText(), FromRPC(err)
}

// ListModels returns the configured models with their capability manifests, sorted by name.
func (c *Client) ListModels(ctx context.Context) ([]*v1.ModelInfo, error) {
	answer, err := c.rpc.ListModels(ctx, &v1.ListModelsRequest{})
	return answer.GetModels(), FromRPC(err)
}

// Validate checks a request against its model's capabilities without running it.
func (c *Client) Validate(ctx context.Context, request *v1.Request) (*v1.ValidateResponse, error) {
	answer, err := c.rpc.Validate(ctx, &v1.ValidateRequest{Request: request})
	return answer, FromRPC(err)
}

// Embed turns each input into a vector with an embedding model (IR 1.1; needs CAPABILITY_EMBEDDINGS), one
// embedding per input, in input order.
func (c *Client) Embed(ctx context.Context, request *v1.EmbedRequest) (*v1.EmbedResponse, error) {
	answer, err := c.rpc.Embed(ctx, request)
	return answer, FromRPC(err)
}

// ServerInfo returns the server's IR version, its own version and its transports.
func (c *Client) ServerInfo(ctx context.Context) (*v1.GetServerInfoResponse, error) {
	answer, err := c.rpc.GetServerInfo(ctx, &v1.GetServerInfoRequest{})
	return answer, FromRPC(err)
}
