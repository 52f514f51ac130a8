// Package integration will hold the end-to-end tests across real processes and servers (the
// Lambda bootstraps under the runtime interface emulator, MinIO in testcontainers). Nothing is
// implemented here yet.
package integration
