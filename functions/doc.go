// Package functions holds the pieces of the ingress, runner and cleanup handlers. Handlers
// depend on the ledger contract only, never on a backend (see DESIGN.md section 2). So far it
// holds the webhook signature schemes (functions/webhook); the handlers are not written yet.
package functions
