//! Hand-written OpenAPI schemas for the bodies whose rules the derive cannot say: a list of
//! tool names that must be names, an MCP server that is exactly one of two shapes. The
//! document must allow what the server accepts and nothing more (`scripts/api-fuzz` checks
//! both ways), so these are written out with utoipa's builders.

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type,
};

/// A string matching `pattern` (`None`: any string).
pub(crate) fn string(pattern: Option<&str>) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(pattern)
}

/// `null` only: a field that may be given as `null` (or left out) but not set.
pub(crate) fn null() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Null)
}

/// An array of `item`s, at most `max`.
pub(crate) fn array(item: ObjectBuilder, max: Option<usize>) -> ArrayBuilder {
    ArrayBuilder::new().items(item).max_items(max)
}

/// An object of string values, at most `max` of them.
pub(crate) fn string_map(max: Option<usize>) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::from(string(None))))
        .max_properties(max)
}

/// A tool name as a list of them holds it: not blank, no spaces around it (which would
/// never match a call, silently).
pub(crate) const TOOL_NAME_PATTERN: &str = r"^\S([\s\S]*\S)?$";

/// `oneOf` the given schemas.
pub(crate) fn one_of(items: impl IntoIterator<Item = RefOr<Schema>>) -> RefOr<Schema> {
    let mut b = OneOfBuilder::new();
    for i in items {
        b = b.item(i);
    }
    RefOr::T(Schema::OneOf(b.build()))
}

pub(crate) fn t(s: impl Into<Schema>) -> RefOr<Schema> {
    RefOr::T(s.into())
}
