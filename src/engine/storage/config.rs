//! One storage configuration for the graph root's own object store and for
//! every Lance dataset under it.
//!
//! Options come from three places, later ones winning: the standard `AWS_*`
//! environment (lower-cased, as `object_store` reads it), the process-wide
//! defaults (the CLI's `--storage-option KEY=VALUE`), and the options a root
//! was opened with (`serve --storage-config`, or [`super::Root::parse_with`]).
//! Keys are `object_store`'s S3 keys (`aws_endpoint`, `aws_region`,
//! `aws_access_key_id`, `allow_http`, …) plus the few Lance reads itself.
//!
//! Never asking the cloud instance-metadata service is a policy here, not a
//! default of either library: both fall back to it when no credentials are
//! given, so an S3 root without static credentials (or an explicit credential
//! scheme) is refused unless `allow_instance_metadata=true` is set.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use lance_io::object_store::{ObjectStoreParams, StorageOptionsAccessor};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};

use crate::protocol::{OmniError, Result};

/// Our own opt-in key: let both clients use the cloud instance-metadata
/// service for credentials (and, for Lance, the region).
pub const ALLOW_INSTANCE_METADATA: &str = "allow_instance_metadata";

/// Keys Lance understands that `object_store` does not; accepted and passed
/// to Lance only.
const LANCE_ONLY_KEYS: &[&str] = &[
    "aws_provider_scheme",
    "use_opendal",
    "client_max_retries",
    "client_retry_timeout",
    "download_retry_count",
    "refresh_offset_millis",
    "expires_at_millis",
];

/// Region both clients use against a custom endpoint that names none: an
/// S3-compatible server ignores it, and leaving it unset makes Lance ask the
/// instance-metadata service.
const ENDPOINT_DEFAULT_REGION: &str = "us-east-1";

/// Storage options: lower-case keys to values. `Debug` hides secret values.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StorageOptions(BTreeMap<String, String>);

impl std::fmt::Debug for StorageOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: BTreeMap<&str, &str> =
            self.0.iter().map(|(k, v)| (k.as_str(), if is_secret(k) { "<redacted>" } else { v.as_str() })).collect();
        shown.fmt(f)
    }
}

impl StorageOptions {
    /// Options from `KEY=VALUE` strings (the CLI's `--storage-option`).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = &'a str>) -> Result<StorageOptions> {
        let split = pairs.into_iter().map(|pair| {
            pair.split_once('=').ok_or_else(|| {
                OmniError::BadRequest(format!("--storage-option takes KEY=VALUE, got `{}`", redact_pair(pair)))
            })
        });
        split.collect::<Result<Vec<_>>>().and_then(Self::normalized)
    }

    /// Options from a map (a storage config file's entry for one graph).
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<StorageOptions> {
        Self::normalized(map.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    fn normalized<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<StorageOptions> {
        pairs
            .into_iter()
            .map(|(k, v)| Ok((normalize_key(k)?, v.to_string())))
            .collect::<Result<_>>()
            .map(StorageOptions)
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Every option, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether no option is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn overlaid(mut self, top: &StorageOptions) -> StorageOptions {
        self.0.extend(top.0.iter().map(|(k, v)| (k.clone(), v.clone())));
        self
    }

    fn truthy(&self, key: &str) -> bool {
        self.get(key).is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
    }

    fn has_region(&self) -> bool {
        self.has_any(&["aws_region", "region", "aws_default_region"])
    }

    fn endpoint(&self) -> Option<&str> {
        ["aws_endpoint", "aws_endpoint_url", "endpoint", "endpoint_url"].iter().find_map(|k| self.get(k))
    }

    fn has_any(&self, keys: &[&str]) -> bool {
        keys.iter().any(|k| self.get(k).is_some_and(|v| !v.is_empty()))
    }
}

/// Lower-cases a key and checks that one of the two clients knows it.
fn normalize_key(key: &str) -> Result<String> {
    let key = key.trim().to_ascii_lowercase();
    let known = key == ALLOW_INSTANCE_METADATA
        || LANCE_ONLY_KEYS.contains(&key.as_str())
        || key.parse::<AmazonS3ConfigKey>().is_ok();
    if !known {
        return Err(OmniError::BadRequest(format!(
            "unknown storage option `{key}` (expected an S3 option such as aws_endpoint, aws_region, \
             aws_access_key_id, allow_http, or {ALLOW_INSTANCE_METADATA})"
        )));
    }
    Ok(key)
}

fn is_secret(key: &str) -> bool {
    key.contains("secret") || key.contains("token") || key.contains("password") || key.contains("sse_customer_key")
}

fn redact_pair(pair: &str) -> String {
    if is_secret(&pair.to_ascii_lowercase()) { "<redacted>".into() } else { pair.to_string() }
}

static DEFAULTS: RwLock<StorageOptions> = RwLock::new(StorageOptions(BTreeMap::new()));
static PER_ROOT: RwLock<Vec<(String, StorageOptions)>> = RwLock::new(Vec::new());

/// Set the options every root opened from now on starts from.
pub fn set_defaults(options: StorageOptions) {
    match DEFAULTS.write() {
        Ok(mut d) => *d = options,
        Err(poisoned) => *poisoned.into_inner() = options,
    }
}

/// Remember `options` for every dataset under `root_uri` (re-registering a
/// root replaces its options).
pub fn register_root(root_uri: &str, options: StorageOptions) {
    let root_uri = root_uri.trim_end_matches('/');
    let mut roots = match PER_ROOT.write() {
        Ok(r) => r,
        Err(poisoned) => poisoned.into_inner(),
    };
    roots.retain(|(uri, _)| uri != root_uri);
    roots.push((root_uri.to_string(), options));
}

/// The options in force for a URI: environment, then defaults, then the
/// longest registered root that contains it, then `explicit`.
pub(super) fn resolve(uri: &str, explicit: &StorageOptions) -> StorageOptions {
    let env = StorageOptions(
        std::env::vars()
            .filter(|(k, _)| k.starts_with("AWS_"))
            .filter_map(|(k, v)| {
                let k = k.to_ascii_lowercase();
                k.parse::<AmazonS3ConfigKey>().is_ok().then_some((k, v))
            })
            .collect(),
    );
    let defaults = match DEFAULTS.read() {
        Ok(d) => d.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    let roots = match PER_ROOT.read() {
        Ok(r) => r,
        Err(poisoned) => poisoned.into_inner(),
    };
    let rooted = longest_root(&roots, uri).cloned().unwrap_or_default();
    env.overlaid(&defaults).overlaid(&rooted).overlaid(explicit)
}

/// The setting of the longest registered root that is `uri` or contains it.
pub(super) fn longest_root<'a, T>(roots: &'a [(String, T)], uri: &str) -> Option<&'a T> {
    roots
        .iter()
        .filter(|(root, _)| uri == root || uri.strip_prefix(root.as_str()).is_some_and(|rest| rest.starts_with('/')))
        .max_by_key(|(root, _)| root.len())
        .map(|(_, setting)| setting)
}

/// Whether `uri` is on S3 (the only object store with credentials we build).
pub(super) fn is_s3(uri: &str) -> bool {
    uri.starts_with("s3://") || uri.starts_with("s3a://")
}

/// Refuse an S3 configuration that would make either client ask the
/// instance-metadata service, unless the user allowed it.
fn check_credentials(bucket_uri: &str, options: &StorageOptions) -> Result<()> {
    if options.truthy(ALLOW_INSTANCE_METADATA)
        || options.truthy("aws_skip_signature")
        || options.truthy("skip_signature")
        || options.has_any(&[
            "aws_provider_scheme",
            "aws_web_identity_token_file",
            "aws_container_credentials_full_uri",
        ])
    {
        return Ok(());
    }
    let key = options.has_any(&["aws_access_key_id", "access_key_id"]);
    let secret = options.has_any(&["aws_secret_access_key", "secret_access_key"]);
    if key && secret {
        return Ok(());
    }
    Err(OmniError::BadRequest(format!(
        "no S3 credentials for `{bucket_uri}`: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or \
         --storage-option aws_access_key_id=… and aws_secret_access_key=…); to use the cloud \
         instance-metadata service instead, pass --storage-option {ALLOW_INSTANCE_METADATA}=true"
    )))
}

/// The graph root's own S3 store, built from the resolved options.
pub(super) fn s3_store(uri: &str, options: &StorageOptions) -> Result<Arc<dyn object_store::ObjectStore>> {
    check_credentials(uri, options)?;
    let mut builder = AmazonS3Builder::new().with_url(uri);
    for (k, v) in &options.0 {
        if let Ok(key) = k.parse::<AmazonS3ConfigKey>() {
            builder = builder.with_config(key, v);
        }
    }
    if options.endpoint().is_some() && !options.has_region() {
        builder = builder.with_region(ENDPOINT_DEFAULT_REGION);
    }
    let store =
        builder.build().map_err(|e| OmniError::BadRequest(format!("invalid S3 configuration for `{uri}`: {e}")))?;
    Ok(Arc::new(store))
}

/// The storage options Lance gets for a dataset at `uri` (`None` for a
/// local dataset, which needs none).
pub(super) fn lance_options(uri: &str) -> Option<HashMap<String, String>> {
    if !is_s3(uri) {
        return None;
    }
    let options = resolve(uri, &StorageOptions::default());
    let mut map: HashMap<String, String> = options
        .0
        .iter()
        .filter(|(k, _)| k.as_str() != ALLOW_INSTANCE_METADATA)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !options.truthy(ALLOW_INSTANCE_METADATA) {
        // Against a custom endpoint, Lance asks the metadata service for a
        // region it was not given (on AWS itself it asks the bucket).
        if options.endpoint().is_some() && !options.has_region() {
            map.insert("aws_region".into(), ENDPOINT_DEFAULT_REGION.into());
        }
        // And for credentials, unless pinned to static keys.
        if options.has_any(&["aws_access_key_id", "access_key_id"]) && !options.has_any(&["aws_provider_scheme"]) {
            map.insert("aws_provider_scheme".into(), "token".into());
        }
    }
    Some(map)
}

/// Lance store parameters for a dataset at `uri`: its storage options and
/// the process's I/O hook, when either applies.
pub(super) fn store_params(
    uri: &str,
    hook: Option<Arc<dyn lance_io::object_store::WrappingObjectStore>>,
) -> Option<ObjectStoreParams> {
    let options = lance_options(uri);
    if options.is_none() && hook.is_none() {
        return None;
    }
    Some(ObjectStoreParams {
        object_store_wrapper: hook,
        storage_options_accessor: options.map(|o| Arc::new(StorageOptionsAccessor::with_static_options(o))),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked_and_secrets_never_shown() {
        let o =
            StorageOptions::from_pairs(["AWS_Secret_Access_Key=hunter2", "aws_endpoint=http://127.0.0.1:9"]).unwrap();
        assert_eq!(o.get("aws_secret_access_key"), Some("hunter2"));
        let shown = format!("{o:?}");
        assert!(!shown.contains("hunter2") && shown.contains("127.0.0.1"), "{shown}");
        let e = StorageOptions::from_pairs(["aws_endpoitn=x"]).unwrap_err().to_string();
        assert!(e.contains("unknown storage option `aws_endpoitn`"), "{e}");
        let e = StorageOptions::from_pairs(["aws_secret_access_key"]).unwrap_err().to_string();
        assert!(!e.contains("aws_secret_access_key") || e.contains("<redacted>"), "{e}");
    }

    #[test]
    fn s3_without_credentials_is_refused_unless_metadata_is_allowed() {
        let bare = StorageOptions::from_pairs(["aws_endpoint=http://127.0.0.1:9"]).unwrap();
        let e = check_credentials("s3://b", &bare).unwrap_err().to_string();
        assert!(e.contains("no S3 credentials for `s3://b`") && e.contains(ALLOW_INSTANCE_METADATA), "{e}");
        let allowed = bare.clone().overlaid(&StorageOptions::from_pairs(["allow_instance_metadata=true"]).unwrap());
        assert!(check_credentials("s3://b", &allowed).is_ok());
        let keyed =
            bare.overlaid(&StorageOptions::from_pairs(["aws_access_key_id=a", "aws_secret_access_key=s"]).unwrap());
        assert!(check_credentials("s3://b", &keyed).is_ok());
    }

    #[test]
    fn the_longest_registered_root_wins_and_only_under_it() {
        register_root("s3://cfg-test/a", StorageOptions::from_pairs(["aws_region=r1"]).unwrap());
        register_root("s3://cfg-test/a/b", StorageOptions::from_pairs(["aws_region=r2"]).unwrap());
        let none = StorageOptions::default();
        assert_eq!(resolve("s3://cfg-test/a/b/t.lance", &none).get("aws_region"), Some("r2"));
        assert_eq!(resolve("s3://cfg-test/a/x.lance", &none).get("aws_region"), Some("r1"));
        assert_ne!(resolve("s3://cfg-test/ab/x.lance", &none).get("aws_region"), Some("r1"));
        let lance = lance_options("s3://cfg-test/a/b/t.lance").unwrap();
        assert_eq!(lance.get("aws_region").map(String::as_str), Some("r2"));
    }
}
