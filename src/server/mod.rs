//! The `omnigraph serve` HTTP daemon (axum). Routes land with the daemon issue.
