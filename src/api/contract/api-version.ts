/** The API's version, in the OpenAPI document, /healthz and `gantry --version`. */
export const API_VERSION = '0.1.0';
