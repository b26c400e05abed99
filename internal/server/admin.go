package server

import (
	"crypto/tls"

	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
)

// ServerTLS returns a TLS config for another listener (the admin one)
// following f as the gRPC server's does: files re-read when they change,
// client certificates required when f names a client CA.
func ServerTLS(f TLSFiles, log logrus.FieldLogger) (*tls.Config, error) {
	return newServerTLS(f, log)
}

// GetServiceInfo lists the gRPC services served, for a reflection service
// on another listener.
func (s *Server) GetServiceInfo() map[string]grpc.ServiceInfo { return s.grpc.GetServiceInfo() }
