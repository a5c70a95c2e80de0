/* KVATLAS_EXPORT: marks what libkvatlas.so exports (docs/abi.md). The library is compiled
 * with hidden visibility, so that only the C ABI (kvatlas/client/c_api.h) and the public
 * C++ API declared in the installed headers (kvatlas/client/, kvatlas/common/) are its
 * interface; internal code, Boost.Asio, nlohmann_json and xxhash instantiations stay
 * private to it. It goes on classes with out-of-line members (`class KVATLAS_EXPORT X`),
 * on free functions and on members of classes that cannot take it. KVATLAS_NO_EXPORT goes
 * on the definitions of implementation classes nested in exported ones (Client::Impl),
 * which would otherwise inherit the export. The static library is built from the same
 * objects. Plain C, since c_api.h includes it. */
#ifndef KVATLAS_COMMON_EXPORT_H_
#define KVATLAS_COMMON_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define KVATLAS_EXPORT __attribute__((visibility("default")))
#define KVATLAS_NO_EXPORT __attribute__((visibility("hidden")))
#else
#define KVATLAS_EXPORT
#define KVATLAS_NO_EXPORT
#endif

#endif /* KVATLAS_COMMON_EXPORT_H_ */
