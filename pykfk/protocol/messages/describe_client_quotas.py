"""DescribeClientQuotas (key 48): the quota settings of the entities matching a filter.
v1 first flexible version."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    48,
    "DescribeClientQuotas",
    versions="0-1",
    flexible="1+",
    request=[
        Field(
            "components",
            "[]ComponentData",
            fields=[
                Field("entity_type", "string"),
                Field("match_type", "int8"),
                Field("match", "string", nullable="0+"),
            ],
        ),
        Field("strict", "bool"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+", default=None),
        Field(
            "entries",
            "[]EntryData",
            nullable="0+",
            fields=[
                Field(
                    "entity",
                    "[]EntityData",
                    fields=[Field("entity_type", "string"), Field("entity_name", "string", nullable="0+")],
                ),
                Field("values", "[]ValueData", fields=[Field("key", "string"), Field("value", "float64")]),
            ],
        ),
    ],
)
