// A real OpenID Connect provider for the tests (the `oidc-provider` package, certified by
// the OpenID Foundation), with its development login and consent pages: any password signs
// in the account named. Run by crates/cli/tests/teams_oidc.rs:
//
//   PORT=… CLIENT_ID=… CLIENT_SECRET=… REDIRECT_URI=… ACCOUNTS='{"ann":{"groups":["ops"]}}' node oidc-provider.mjs
//
// Prints `ready ISSUER` once it listens.
import Provider from 'oidc-provider';

const port = Number(process.env.PORT);
const issuer = `http://127.0.0.1:${port}`;
const accounts = JSON.parse(process.env.ACCOUNTS ?? '{}');

const provider = new Provider(issuer, {
  clients: [{
    client_id: process.env.CLIENT_ID,
    client_secret: process.env.CLIENT_SECRET,
    redirect_uris: [process.env.REDIRECT_URI],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  pkce: { required: () => true },
  claims: { openid: ['sub'], profile: ['preferred_username', 'name', 'groups'], email: ['email'] },
  // Claims go into the ID token itself (not only the userinfo endpoint).
  conformIdTokenClaims: false,
  features: { devInteractions: { enabled: true } },
  async findAccount(_ctx, sub) {
    const extra = accounts[sub];
    if (!extra) return undefined;
    return {
      accountId: sub,
      async claims() {
        return { sub, preferred_username: sub, name: sub, email: `${sub}@example.com`, ...extra };
      },
    };
  },
});
// Plain http on loopback: the provider allows it outside production.
provider.listen(port, '127.0.0.1', () => {
  console.log(`ready ${issuer}`);
});
