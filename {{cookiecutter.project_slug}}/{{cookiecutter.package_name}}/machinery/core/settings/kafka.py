"""The Kafka connection a source or the sink shares: the bootstrap servers, the security (SASL, its
password by the environment variable's name), and client options beside the managed ones."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, field_validator, model_validator

from .section import ENV_VAR_NAME, Section


class KafkaConnection(Section):
    """How the job reaches a Kafka cluster, as a source or as the sink: the address, the security, and
    client options beside the ones the fields build (secrets by the environment variable's name)."""

    bootstrap_servers: str = Field(
        "localhost:9092", pattern=r"^[^\s,]+(,[^\s,]+)*$", description="host:port[,host:port...]"
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        None, description="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, or null"
    )
    sasl_username: str | None = Field(None, min_length=1, description="the SASL user name, or null")
    sasl_password_env: str | None = Field(
        None, pattern=ENV_VAR_NAME, description="the NAME of the environment variable holding the password"
    )
    options: dict[str, str] = Field(default_factory=dict, description="a mapping of extra Kafka client options")
    # Options whose values are secrets: option name -> NAME of the environment variable holding the value.
    secret_options: dict[str, Annotated[str, Field(pattern=ENV_VAR_NAME)]] = Field(
        default_factory=dict, description="a mapping of option names to environment variable NAMES"
    )

    # Spark options the fields build (lower case -> the field), which `options` may not set behind their back.
    MANAGED: ClassVar[dict[str, str]] = {
        "kafka.bootstrap.servers": "bootstrap_servers",
        "kafka.security.protocol": "security_protocol",
        "kafka.sasl.mechanism": "sasl_mechanism",
    }
    SECTION: ClassVar[str] = "kafka"

    @field_validator("options")
    @classmethod
    def _no_secrets_or_managed_options(cls, options: dict[str, str]) -> dict[str, str]:
        for key in options:
            lowered = key.lower()
            if any(word in lowered for word in ("password", "jaas", "secret")):
                raise ValueError(
                    f"{key} would put a secret in settings.yaml; move it to secret_options, which names"
                    " the environment variable holding the value"
                )
            if lowered in cls.MANAGED:
                raise ValueError(f"{key} is managed by {cls.SECTION}.{cls.MANAGED[lowered]}; set it there")
        return options

    @model_validator(mode="after")
    def _complete_sasl(self) -> Self:
        sasl = {
            "sasl_mechanism": self.sasl_mechanism,
            "sasl_username": self.sasl_username,
            "sasl_password_env": self.sasl_password_env,
        }
        if self.security_protocol.startswith("SASL_"):
            missing = [name for name, value in sasl.items() if value is None]
            if missing:
                raise ValueError(f"security_protocol {self.security_protocol} needs {', '.join(missing)}; set them")
        else:
            ignored = [name for name, value in sasl.items() if value is not None]
            if ignored:
                raise ValueError(
                    f"{', '.join(ignored)} would be ignored with security_protocol {self.security_protocol};"
                    " use SASL_SSL (or SASL_PLAINTEXT), or set them to null"
                )
        return self

    def secrets(self, section: str) -> dict[str, str]:
        """Setting -> the environment variable it names, for every secret this connection needs."""
        needed = {f"{section}.kafka.secret_options.{key}": name for key, name in self.secret_options.items()}
        if self.sasl_password_env is not None:
            needed[f"{section}.kafka.sasl_password_env"] = self.sasl_password_env
        return needed
