// Package functions will hold the ingress, runner and cleanup handlers, the webhook signature
// schemes, the evaluators and the publishers. Handlers depend on the ledger contract only,
// never on a backend (see DESIGN.md section 2); nothing is implemented here yet.
package functions
