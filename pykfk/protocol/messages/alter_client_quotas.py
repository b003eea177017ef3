"""AlterClientQuotas (key 49): set or remove quota settings of user / client-id entities
(a null name is the entity type's default). v1 first flexible version."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    49,
    "AlterClientQuotas",
    versions="0-1",
    flexible="1+",
    request=[
        Field(
            "entries",
            "[]EntryData",
            fields=[
                Field(
                    "entity",
                    "[]EntityData",
                    fields=[Field("entity_type", "string"), Field("entity_name", "string", nullable="0+")],
                ),
                Field(
                    "ops",
                    "[]OpData",
                    fields=[Field("key", "string"), Field("value", "float64"), Field("remove", "bool")],
                ),
            ],
        ),
        Field("validate_only", "bool"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field(
            "entries",
            "[]EntryData",
            fields=[
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
                Field(
                    "entity",
                    "[]EntityData",
                    fields=[Field("entity_type", "string"), Field("entity_name", "string", nullable="0+")],
                ),
            ],
        ),
    ],
)
