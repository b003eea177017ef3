"""Security: TLS contexts, SASL logins (PLAIN, SCRAM-SHA-256/512, delegation tokens,
OAUTHBEARER, GSSAPI) and principals.

Sans-io where it can be: ``scram`` and ``sasl`` hold the exchanges (bytes in, bytes out),
``tokens`` Kafka's delegation token rules, ``oauth`` JWT validation against a JWKS,
``kerberos`` GSSAPI acceptance and Kafka's principal-to-local rules,
``jaas`` reads Kafka's JAAS settings, ``tls`` builds ``ssl.SSLContext`` objects from
Kafka's ``ssl.*`` settings and turns a client certificate into a principal. The server
layer (``pykfk.server.session``) runs them per connection.
"""
