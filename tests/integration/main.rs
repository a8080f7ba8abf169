//! Integration tests: one binary (each test binary links Lance), one module per area.
//! Every test uses real Lance datasets in a temporary directory.

mod actors;
mod cli;
mod common;
mod cookbooks;
mod docs_examples;
mod faults;
mod foundation;
mod publisher;
mod queries;
mod server;
mod source_rules;
mod writes;
