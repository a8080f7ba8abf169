//! Parameters: JSON values checked against the query's declared types.

use std::collections::BTreeMap;

use serde_json::{Map, Value as Json};

use crate::engine::lang::query::ir::ParamIr;
use crate::protocol::{OmniError, Result};

/// Checked parameter values by name.
pub type ParamValues = BTreeMap<String, Json>;

/// Check `given` against the declared params: every non-nullable param must
/// be present, nothing undeclared may be passed.
pub fn bind_params(declared: &[ParamIr], given: &Map<String, Json>) -> Result<ParamValues> {
    for name in given.keys() {
        if !declared.iter().any(|p| &p.name == name) {
            return Err(OmniError::BadRequest(format!("parameter `${name}` is not declared by the query")));
        }
    }
    let mut out = ParamValues::new();
    for p in declared {
        match given.get(&p.name) {
            Some(Json::Null) | None if !p.ty.nullable => {
                return Err(OmniError::BadRequest(format!("missing parameter `${}`", p.name)));
            }
            Some(v) => {
                out.insert(p.name.clone(), v.clone());
            }
            None => {
                out.insert(p.name.clone(), Json::Null);
            }
        }
    }
    Ok(out)
}
