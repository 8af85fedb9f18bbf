// The HTTP API as the page calls it: the bearer token (kept in sessionStorage, for this tab
// only) on every request, problem+json errors thrown as ApiError.
const TOKEN_KEY = "dsh-inspector-token";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export class ApiError extends Error {
  constructor(problem) {
    super(`${problem.code || problem.status}: ${problem.detail || problem.title}`);
    this.problem = problem;
  }
}

export function headers(extra = {}) {
  const out = { ...extra };
  if (token()) out.Authorization = `Bearer ${token()}`;
  return out;
}

export async function getJson(path, signal) {
  const response = await fetch(path, { headers: headers(), signal });
  const body = await response.json().catch(() => ({ status: response.status, detail: response.statusText }));
  if (!response.ok) throw new ApiError(body);
  return body;
}

export const sessionPath = (id) => `/v1/sessions/${encodeURIComponent(id)}`;
