//! Typed reads of config json fields, each failure a named error: the op, the file, the field's
//! full path (`depth_decoder_config.hidden_size`) and what was wrong. Shared by the model
//! families' config parsers.

use crate::{Error, Result};
pub use serde_json::Value as JsonValue;

/// One json object and where it sits (file, dotted path).
pub struct Fields<'a> {
    op: &'static str,
    obj: &'a serde_json::Map<String, JsonValue>,
    file: &'a str,
    path: String,
}

impl<'a> Fields<'a> {
    /// The top-level object of `file`; `op` (`CsmConfig`) names the parser in errors.
    pub fn root(op: &'static str, value: &'a JsonValue, file: &'a str) -> Result<Self> {
        let obj = value.as_object().ok_or_else(|| Error::Format {
            op,
            path: file.into(),
            reason: "the top level is not a JSON object".into(),
        })?;
        Ok(Self {
            op,
            obj,
            file,
            path: String::new(),
        })
    }

    fn full(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.path)
        }
    }

    /// An error about this object (or one of its fields).
    pub fn malformed(&self, reason: String) -> Error {
        let reason = if self.path.is_empty() {
            reason
        } else {
            format!("in `{}`: {reason}", self.path)
        };
        Error::Format {
            op: self.op,
            path: self.file.into(),
            reason,
        }
    }

    fn field_error(&self, name: &str, what: &str) -> Error {
        Error::Format {
            op: self.op,
            path: self.file.into(),
            reason: format!("field `{}` {what}", self.full(name)),
        }
    }

    /// True when the field is present (even if null).
    pub fn has(&self, name: &str) -> bool {
        self.obj.contains_key(name)
    }

    /// The field, None when absent or null.
    fn get(&self, name: &str) -> Option<&'a JsonValue> {
        self.obj.get(name).filter(|v| !v.is_null())
    }

    fn required(&self, name: &str) -> Result<&'a JsonValue> {
        self.get(name)
            .ok_or_else(|| self.field_error(name, "is missing"))
    }

    /// A non-negative integer field that must be present.
    pub fn usize(&self, name: &str) -> Result<usize> {
        let v = self.required(name)?;
        as_usize(v)
            .ok_or_else(|| self.field_error(name, &format!("is {v}, not a non-negative integer")))
    }

    /// A non-negative integer field, None when absent or null.
    pub fn opt_usize(&self, name: &str) -> Result<Option<usize>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => as_usize(v).map(Some).ok_or_else(|| {
                self.field_error(name, &format!("is {v}, not a non-negative integer"))
            }),
        }
    }

    /// A token id field (fits u32), None when absent or null.
    pub fn opt_u32(&self, name: &str) -> Result<Option<u32>> {
        match self.opt_usize(name)? {
            None => Ok(None),
            Some(v) => u32::try_from(v)
                .map(Some)
                .map_err(|_| self.field_error(name, &format!("is {v}, too large for a token id"))),
        }
    }

    /// A number field that must be present, as f32.
    pub fn f32(&self, name: &str) -> Result<f32> {
        let v = self.required(name)?;
        v.as_f64()
            .map(|x| x as f32)
            .ok_or_else(|| self.field_error(name, &format!("is {v}, not a number")))
    }

    /// A number field, None when absent or null.
    pub fn opt_f32(&self, name: &str) -> Result<Option<f32>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|x| Some(x as f32))
                .ok_or_else(|| self.field_error(name, &format!("is {v}, not a number"))),
        }
    }

    /// A string field that must be present.
    pub fn str(&self, name: &str) -> Result<&'a str> {
        let v = self.required(name)?;
        v.as_str()
            .ok_or_else(|| self.field_error(name, &format!("is {v}, not a string")))
    }

    /// A string field, None when absent or null.
    pub fn opt_str(&self, name: &str) -> Result<Option<&'a str>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.field_error(name, &format!("is {v}, not a string"))),
        }
    }

    /// A boolean field, None when absent or null.
    pub fn opt_bool(&self, name: &str) -> Result<Option<bool>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.field_error(name, &format!("is {v}, not a boolean"))),
        }
    }

    /// An array of non-negative integers, None when absent or null.
    pub fn opt_array_usize(&self, name: &str) -> Result<Option<Vec<usize>>> {
        let Some(v) = self.get(name) else {
            return Ok(None);
        };
        let bad = || {
            self.field_error(
                name,
                &format!("is {v}, not an array of non-negative integers"),
            )
        };
        let items = v.as_array().ok_or_else(bad)?;
        items
            .iter()
            .map(|x| as_usize(x).ok_or_else(bad))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// A nested object that must be present.
    pub fn object(&self, name: &str) -> Result<Fields<'a>> {
        self.opt_object(name)?
            .ok_or_else(|| self.field_error(name, "is missing"))
    }

    /// A nested object, None when absent or null.
    pub fn opt_object(&self, name: &str) -> Result<Option<Fields<'a>>> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => {
                let obj = v
                    .as_object()
                    .ok_or_else(|| self.field_error(name, &format!("is {v}, not an object")))?;
                Ok(Some(Fields {
                    op: self.op,
                    obj,
                    file: self.file,
                    path: self.full(name),
                }))
            }
        }
    }

    /// The object holding field `key`: this one, or its nested `args` (a config saved with its
    /// arguments under `args`, as Sesame's); None when neither has it.
    pub fn args_with(&self, key: &str) -> Result<Option<Fields<'a>>> {
        if self.has(key) {
            return Ok(Some(Fields {
                op: self.op,
                obj: self.obj,
                file: self.file,
                path: self.path.clone(),
            }));
        }
        match self.opt_object("args")? {
            Some(args) if args.has(key) => Ok(Some(args)),
            _ => Ok(None),
        }
    }
}

/// A json number that is a whole non-negative value (`8` or `8.0`).
fn as_usize(v: &JsonValue) -> Option<usize> {
    if let Some(u) = v.as_u64() {
        return usize::try_from(u).ok();
    }
    let f = v.as_f64()?;
    (f >= 0.0 && f.fract() == 0.0 && f < 2f64.powi(53)).then_some(f as usize)
}
