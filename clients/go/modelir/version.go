// Package modelir is a thin Go client for the modelir ModelService: one method per RPC, typed errors decoded
// from the rich gRPC status, accessors for responses, stream accumulation and the IR version handshake.
package modelir

import (
	"fmt"
	"regexp"
	"strconv"

	"google.golang.org/protobuf/proto"

	v1 "modelir.dev/go/modelir/v1"
)

// IRVersion is the `(modelir.v1.ir_version)` option of the version.proto this client was generated from.
var IRVersion = proto.GetExtension(v1.File_modelir_v1_version_proto.Options(), v1.E_IrVersion).(string)

var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:[-+].*)?$`)

// Major is the major number of a semantic version, or an error for anything that is not one.
func Major(version string) (int, error) {
	m := semver.FindStringSubmatch(version)
	if m == nil {
		return 0, fmt.Errorf("not a semantic version: %q", version)
	}
	return strconv.Atoi(m[1])
}

// IncompatibleServerError says the server speaks an IR of another major version than the client's.
type IncompatibleServerError struct {
	ClientIRVersion, ServerIRVersion string
}

func (e *IncompatibleServerError) Error() string {
	server := e.ServerIRVersion
	if server == "" {
		server = "(none reported)"
	}
	return fmt.Sprintf("the server speaks modelir IR %s, but this client was generated from IR %s: the major "+
		"versions differ, so the client refuses it (regenerate the client from the server's proto/ or talk to a "+
		"server of the same major version)", server, e.ClientIRVersion)
}

// CheckCompatible returns an *IncompatibleServerError unless serverIRVersion has clientIRVersion's major number.
func CheckCompatible(serverIRVersion, clientIRVersion string) error {
	client, err := Major(clientIRVersion)
	if err != nil {
		return err
	}
	server, err := Major(serverIRVersion)
	if err != nil || server != client {
		return &IncompatibleServerError{ClientIRVersion: clientIRVersion, ServerIRVersion: serverIRVersion}
	}
	return nil
}
